"""Agent-like load: concurrent multi-turn chat sessions whose context grows turn by turn.

Each session sends a streaming chat completion, appends the answer and a new user turn
(a tool result, a file excerpt) to its history, and goes on; when the context nears the
model's limit it starts over, as an agent that compacts its history would. Tokens are
counted from ``usage`` (``stream_options.include_usage``): with speculative decoding one
SSE chunk can carry several tokens.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import httpx

from agent_supervisor.load.profiles import Profile

__all__ = ["AgentLoad", "RequestRecord", "summarize"]

_TOOL_RESULTS = [
    '{"name": "read_file", "result": "def main():\\n    return run(config)\\n"}',
    '{"name": "run_tests", "result": "3 passed, 1 failed: test_store.py::test_update"}',
    '{"name": "grep", "result": "server.py:41: timeout = 30\\nutils.py:12: retries = 3"}',
    '{"name": "list_dir", "result": "main.py server.py utils.py README.md policy.yaml"}',
]
_ASKS = ["I will read the file in main.py and then patch the function in utils.py.",
         "Run the tests and fix the failing one in store.py.",
         "Search the log for the error and write the fix in server.py."]


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the client saw it. Times in seconds, monotonic."""

    started_s: float
    ttft_seconds: float | None
    duration_seconds: float
    completion_tokens: int
    prompt_tokens: int
    ok: bool
    error: str | None = None


@dataclass
class AgentLoad:
    """``concurrency`` sessions against ``base_url`` (``http://host:port``) for a while."""

    base_url: str
    model: str
    concurrency: int = 4
    max_tokens: int = 96
    context_limit_tokens: int = 1024
    seed: int = 0
    timeout_seconds: float = 120.0
    records: list[RequestRecord] = field(default_factory=list)
    profile: Profile | None = None
    """The work (``agent_supervisor.load.profiles``); None: the agent turns above,
    ``max_tokens``."""

    async def run(self, seconds: float) -> list[RequestRecord]:
        """Run every session for ``seconds`` (a request in flight then finishes)."""
        deadline = time.monotonic() + seconds
        limits = httpx.Limits(max_connections=self.concurrency + 2)
        async with httpx.AsyncClient(timeout=self.timeout_seconds, limits=limits) as client:
            await asyncio.gather(*(self._session(client, i, deadline)
                                   for i in range(self.concurrency)))
        return self.records

    async def _session(self, client: httpx.AsyncClient, i: int, deadline: float) -> None:
        rng = random.Random(self.seed * 1000 + i)
        asks = self.profile.asks if self.profile else _ASKS
        follow = self.profile.follow_ups if self.profile else _TOOL_RESULTS
        max_tokens = self.profile.max_tokens if self.profile else self.max_tokens
        history = [{"role": "user", "content": rng.choice(asks)}]
        while time.monotonic() < deadline:
            record, answer = await self._one(client, history, max_tokens)
            self.records.append(record)
            if not record.ok:
                await asyncio.sleep(0.5)
                continue
            if not follow or \
                    record.prompt_tokens + 2 * max_tokens + 64 > self.context_limit_tokens:
                history = [{"role": "user", "content": rng.choice(asks)}]   # a new session
                continue
            history += [{"role": "assistant", "content": answer},
                        {"role": "user", "content": rng.choice(follow)}]

    async def _one(self, client: httpx.AsyncClient, history: list[dict],
                   max_tokens: int) -> tuple[RequestRecord, str]:
        body = {"model": self.model, "messages": history, "max_tokens": max_tokens,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        t0 = time.monotonic()
        ttft = None
        parts: list[str] = []
        usage: dict = {}
        try:
            async with client.stream("POST", f"{self.base_url}/v1/chat/completions",
                                     json=body) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    return RequestRecord(t0, None, time.monotonic() - t0, 0, 0, False,
                                         f"HTTP {resp.status_code}: {resp.text[:200]}"), ""
                async for line in resp.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("error"):
                        return RequestRecord(t0, ttft, time.monotonic() - t0, 0, 0, False,
                                             f"error event: {chunk['error']}"), ""
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    for choice in chunk.get("choices") or ():
                        text = (choice.get("delta") or {}).get("content")
                        if text:
                            ttft = ttft if ttft is not None else time.monotonic() - t0
                            parts.append(text)
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            return RequestRecord(t0, ttft, time.monotonic() - t0, 0, 0, False,
                                 f"{exc.__class__.__name__}: {exc}"), ""
        return RequestRecord(t0, ttft, time.monotonic() - t0,
                             int(usage.get("completion_tokens", 0)),
                             int(usage.get("prompt_tokens", 0)), True), "".join(parts)


def summarize(records: list[RequestRecord], seconds: float) -> dict[str, float | int | None]:
    """Totals of a load run: requests, failures, tokens/s in total and per request, TTFT.

    Per-request tokens/s is completion tokens over the request's duration, averaged over
    the successful requests; total tokens/s is all completion tokens over ``seconds``.
    """
    ok = [r for r in records if r.ok and r.completion_tokens > 0]
    ttfts = sorted(r.ttft_seconds for r in ok if r.ttft_seconds is not None)
    return {
        "requests": len(records),
        "failed": sum(not r.ok for r in records),
        "completion_tokens": sum(r.completion_tokens for r in ok),
        "tokens_per_second_total": sum(r.completion_tokens for r in ok) / seconds,
        "tokens_per_second_per_request": (
            sum(r.completion_tokens / r.duration_seconds for r in ok) / len(ok) if ok else 0.0),
        "ttft_seconds_p50": ttfts[len(ttfts) // 2] if ttfts else None,
    }

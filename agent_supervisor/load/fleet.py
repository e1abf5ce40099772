"""An agent fleet on the OpenAI SDK: tool-calling sessions whose context grows turn by
turn, bursts, and now and then a very long prompt.

Each session plays a coding agent: it asks, streams the answer, appends a tool call and
the tool's result to its history, asks again; past the context budget it compacts (starts
over). Bursts: every ``burst_every_seconds`` all sessions fire at once after a pause.
Long prompts: with probability ``long_prompt_probability`` a turn carries a long file
excerpt. Every request is recorded (ok or why not, time to first token, tokens from the
stream's ``usage``).

Tasks (``task_turns``): an agent's task is that many successful turns in a row; a failed
request fails the task (the agent gives up on it, as an agent run does when its model
call errors) and the agent starts the next task afresh. Each finished task is a
``TaskRecord``; one cut off by the end of the run is not recorded.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import openai

from agent_supervisor.load.agents import RequestRecord

__all__ = ["Fleet", "TaskRecord"]

_TOOLS = [{"type": "function", "function": {
    "name": name, "description": desc,
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}
    for name, desc in (("read_file", "Read a file"), ("run_tests", "Run the test suite"),
                       ("grep", "Search the code"))]
_FILE = ("def handle(request):\n    if request.path == '/health':\n        return 200\n"
         "    return route(request)\n")
_ASKS = ["Read main.py and fix the failing test in store.py.",
         "Find where the timeout is set and make it configurable.",
         "Run the tests and patch the function that fails."]


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One agent task. Times in seconds, monotonic; ``requests`` counts its turns sent."""

    agent: int
    started_s: float
    ended_s: float
    requests: int
    ok: bool
    error: str | None = None


@dataclass
class Fleet:
    """``sessions`` agents against ``base_url`` (an OpenAI-compatible ``.../v1``)."""

    base_url: str
    model: str
    sessions: int = 8
    max_tokens: int = 64
    context_limit_tokens: int = 900
    long_prompt_probability: float = 0.05
    long_prompt_tokens: int = 600
    burst_every_seconds: float | None = None
    stream: bool = True
    api_key: str = "none"
    seed: int = 0
    timeout_seconds: float = 300.0
    records: list[RequestRecord] = field(default_factory=list)
    task_turns: int | None = None
    """Successful turns that complete a task (None: no tasks are kept)."""
    tasks: list[TaskRecord] = field(default_factory=list)
    failure_pause_seconds: float = 0.5
    """Pause after a failed request (with tasks: before the agent's next task)."""

    async def run(self, seconds: float, stop: asyncio.Event | None = None) -> list[RequestRecord]:
        """Run for ``seconds`` or until ``stop`` is set; requests in flight finish."""
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key,
                                    max_retries=0, timeout=self.timeout_seconds)
        deadline = time.monotonic() + seconds
        stop = stop or asyncio.Event()
        try:
            await asyncio.gather(*(self._agent(client, i, deadline, stop)
                                   for i in range(self.sessions)))
        finally:
            await client.close()
        return self.records

    async def _agent(self, client: openai.AsyncOpenAI, i: int, deadline: float,
                     stop: asyncio.Event) -> None:
        rng = random.Random(self.seed * 7919 + i)
        history: list[dict] = [{"role": "user", "content": rng.choice(_ASKS)}]
        used = 0
        task_start, turns = time.monotonic(), 0
        while time.monotonic() < deadline and not stop.is_set():
            if self.burst_every_seconds:
                phase = time.monotonic() % self.burst_every_seconds
                if phase > self.burst_every_seconds / 2:      # quiet half: wait for the burst
                    await asyncio.sleep(self.burst_every_seconds - phase)
            record, answer = await self._turn(client, history)
            self.records.append(record)
            turns += 1
            if self.task_turns and (not record.ok or turns >= self.task_turns):
                self.tasks.append(TaskRecord(i, task_start, time.monotonic(), turns, record.ok,
                                             record.error))
                task_start, turns = time.monotonic(), 0
                history = [{"role": "user", "content": rng.choice(_ASKS)}]
                if record.ok:
                    continue
            if not record.ok:
                await asyncio.sleep(self.failure_pause_seconds)
                continue
            used = record.prompt_tokens + record.completion_tokens
            call = {"name": rng.choice(_TOOLS)["function"]["name"],
                    "arguments": json.dumps({"path": "main.py"})}
            result = _FILE * (self.long_prompt_tokens // 20
                              if rng.random() < self.long_prompt_probability else 1)
            history += [{"role": "assistant", "content": answer + "\n" + json.dumps(call)},
                        {"role": "tool", "content": result, "tool_call_id": f"call_{i}"},
                        {"role": "user", "content": "Go on."}]
            if used + len(result) // 3 + 2 * self.max_tokens > self.context_limit_tokens:
                history = [{"role": "user", "content": rng.choice(_ASKS)}]

    async def _turn(self, client: openai.AsyncOpenAI, history: list[dict]
                    ) -> tuple[RequestRecord, str]:
        t0 = time.monotonic()
        ttft = None
        parts: list[str] = []
        try:
            if not self.stream:
                reply = await client.chat.completions.create(
                    model=self.model, messages=history, max_tokens=self.max_tokens,
                    temperature=0, tools=_TOOLS, tool_choice="none")
                u = reply.usage
                return RequestRecord(t0, None, time.monotonic() - t0, u.completion_tokens,
                                     u.prompt_tokens, True), reply.choices[0].message.content or ""
            stream = await client.chat.completions.create(
                model=self.model, messages=history, max_tokens=self.max_tokens, temperature=0,
                tools=_TOOLS, tool_choice="none", stream=True,
                stream_options={"include_usage": True})
            usage = None
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    ttft = ttft if ttft is not None else time.monotonic() - t0
                    parts.append(chunk.choices[0].delta.content)
                if getattr(chunk, "error", None):
                    raise openai.APIError(str(chunk.error), request=None, body=None)  # type: ignore[arg-type]
                if chunk.usage:
                    usage = chunk.usage
            if usage is None:
                raise openai.APIError("stream ended without usage (cut off)", request=None,
                                      body=None)  # type: ignore[arg-type]
        except (TimeoutError, openai.OpenAIError, json.JSONDecodeError) as exc:
            return RequestRecord(t0, ttft, time.monotonic() - t0, 0, 0, False,
                                 f"{exc.__class__.__name__}: {str(exc)[:200]}"), ""
        return RequestRecord(t0, ttft, time.monotonic() - t0, usage.completion_tokens,
                             usage.prompt_tokens, True), "".join(parts)

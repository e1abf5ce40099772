"""Issue 29 over real HTTP: an engine that runs past the request's ``max_tokens`` (the
stand-in engine with ``--ignore-max-tokens``, as llama-server did after a context shift:
llama.cpp #25026) is ended by the gateway with an error event and recorded; a long answer
within its ``max_tokens`` passes untouched (the control)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from agent_supervisor.sense.gateway_load import gateway_fields
from tests.helpers.gateway_rig import Rig, chat

MODES = [{"name": "fast", "gateway": {"max_concurrency": 4, "max_queue": 4}}]


async def read_stream(c: httpx.AsyncClient, url: str, body: dict) -> tuple[int, dict | None]:
    """(words of content received, the error event if one came)."""
    words, error = 0, None
    async with c.stream("POST", url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                error = ev["error"]
            for ch in ev.get("choices", ()):
                words += len((ch.get("delta") or {}).get("content", "").split())
    return words, error


async def test_a_stream_past_max_tokens_is_ended_and_recorded(tmp_path: Path) -> None:
    args = ("--tokens", "600", "--ignore-max-tokens", "--token-delay", "0.002")
    async with Rig(tmp_path, engine_args=args, modes=MODES) as rig:
        async with httpx.AsyncClient(timeout=30) as c:
            words, error = await read_stream(c, rig.url, chat(stream=True, max_tokens=100))
        # 100 + 32 + 10 counted: ended after the read that went past it (one read of the
        # engine connection is passed on whole: never less than asked for), before 600.
        assert words >= 142 and words < 600, words
        assert error is not None and "max_tokens" in error["message"]
        assert gateway_fields(rig.gw)["gateway_overrun_answers_total"] == 1
        assert rig.metric('supervisor_gateway_overrun_answers_total{agent="anonymous"}') == 1


async def test_a_long_answer_within_max_tokens_is_untouched(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "600"), modes=MODES) as rig:
        async with httpx.AsyncClient(timeout=30) as c:
            words, error = await read_stream(c, rig.url, chat(stream=True, max_tokens=600))
            whole = await c.post(rig.url + "/v1/chat/completions", json=chat(max_tokens=600))
        assert (words, error) == (600, None)
        assert whole.json()["usage"]["completion_tokens"] == 600
        assert gateway_fields(rig.gw)["gateway_overrun_answers_total"] == 0


async def test_switched_off_it_is_recorded_but_not_ended(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "400", "--ignore-max-tokens"),
                   modes=MODES, gateway={"end_overrun_answers": False}) as rig:
        async with httpx.AsyncClient(timeout=30) as c:
            words, error = await read_stream(c, rig.url, chat(stream=True, max_tokens=50))
        assert (words, error) == (400, None)
        assert gateway_fields(rig.gw)["gateway_overrun_answers_total"] == 1

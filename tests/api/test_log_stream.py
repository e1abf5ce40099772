"""GET /api/engine/log/stream (issue 19's left item): the engine's log as server-sent
events on a running service: the run's last lines first, then each line the engine
writes, as it writes it; a restart of the engine starts a new ``run`` event."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx

from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.admin_api import auth
from tests.helpers.waiting import wait_for


async def _events(resp: httpx.Response, out: list[tuple[str, dict]]) -> None:
    name, buf = None, []
    async for line in resp.aiter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            buf.append(line[6:])
        elif line == "" and buf:
            out.append((name or "message", json.loads("\n".join(buf))))
            name, buf = None, []


async def test_the_log_stream_sends_new_engine_lines_and_a_new_run(
        service: Supervisor, client: httpx.AsyncClient) -> None:
    events: list[tuple[str, dict]] = []
    async with client.stream("GET", "/api/engine/log/stream?lines=5") as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        reader = asyncio.create_task(_events(resp, events))
        try:
            await wait_for(lambda: events, timeout=5, what="the first event")
            name, first = events[0]
            assert name == "run" and first["run_id"] == service.launcher.run.run_id
            assert first["text"].count("\n") <= 5
            marker = uuid.uuid4().hex
            async with httpx.AsyncClient(timeout=5) as engine:
                await engine.get(f"http://127.0.0.1:{service.policy.engine.port}"
                                 f"/v1/models?live={marker}")
            await wait_for(lambda: any(n == "append" and marker in d["text"]
                                       for n, d in events), timeout=5,
                           what="the engine's new line as an append event")
            old = service.launcher.run.run_id
            assert (await client.post("/api/actions/restart", headers=auth())).status_code \
                == 200
            await wait_for(lambda: service.launcher.run.run_id != old
                           and service.launcher.state is EngineState.READY, timeout=30,
                           what="a restarted engine")
            await wait_for(lambda: any(n == "run" and d["run_id"] != old
                                       for n, d in events), timeout=5,
                           what="a run event for the new engine")
        finally:
            reader.cancel()

"""Issue 31 item 1: an operator's lever while the service advises is the operator acting,
not the supervisor: carried out and recorded as the operator's. The whole service
in-process with the stand-in engine (tests/helpers/fake_engine.py, real processes), a real
SQLite store, the levers over the real admin API: ``step-down`` relaunches the engine in
the next mode (a new run, the transition's actor ``operator``), ``restart`` drains and
relaunches it in the same mode; a crash after that is still only advice."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.admin_api import TOKEN, auth
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for

FAST = {"tick_seconds": 0.2, "probe_timeout_seconds": 1}


async def test_issue_31_the_operators_levers_act_while_advising(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPERVISOR_ADMIN_TOKEN", TOKEN)
    policy = fake_engine_policy(tmp_path, sampling=FAST, mode="advise",
                                restart={"restart_delay_seconds": 0})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    reader = Store.open(policy.database_url, fleet=policy.fleet)
    task = asyncio.create_task(sup.run())
    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                       what="the engine launched in advise mode")
        first = sup.launcher.run
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{policy.admin.port}",
                                     timeout=10) as client:
            r = await client.post("/api/actions/step-down", headers=auth())
            assert r.status_code == 200 and r.json()["supervision"] == "advise"
            t0 = time.monotonic()
            await wait_for(lambda: sup.launcher.run is not first and sup.launcher.state
                           is EngineState.READY, timeout=20, what="the step down carried out")
            print(f"\nstep-down lever while advising -> mode safe ready in "
                  f"{time.monotonic() - t0:.1f} s")
            second = sup.launcher.run
            assert second.mode == "safe" and sup.ladder.rung == 1
            r = await client.post("/api/actions/restart", headers=auth())
            assert r.status_code == 200
            await wait_for(lambda: sup.launcher.run is not second and sup.launcher.state
                           is EngineState.READY, timeout=20, what="the restart carried out")
            third = sup.launcher.run
            assert third.mode == "safe"
        await sup.writer.flush()
        got = list(reversed(reader.incidents()))
        moved = [i for i in got if i.action == "step_down"]
        assert len(moved) == 1 and moved[0].explanation.startswith(
            "the operator's lever, carried out in advise mode: moved by the operator to safe")
        (tr,) = [t for t in reader.transitions() if t.to_mode == "safe"]
        assert tr.actor == "operator"
        assert any(i.action == "reload" and "operator's lever" in i.explanation for i in got)
        assert not [i for i in got if i.action.startswith("would_")]
        assert [r.mode for r in reversed(reader.runs())] == ["fast", "safe", "safe"]

        os.kill(third.pid, signal.SIGKILL)       # a crash: the supervisor's call, advised
        await wait_for(lambda: sup.launcher.state is EngineState.CRASHED, timeout=10,
                       what="the crash seen")
        t0 = time.monotonic()
        while True:
            await sup.writer.flush()
            if any(i.action == "would_restart" for i in reader.incidents()):
                break
            assert time.monotonic() - t0 < 10, "the crash not advised"
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        assert sup.launcher.run is third and sup.launcher.state is EngineState.CRASHED
    finally:
        sup.request_stop("test over")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        reader.close()

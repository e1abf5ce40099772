"""Issue 31 item 1, advisory mode, the whole service in-process against the stand-in
engine (tests/helpers/fake_engine.py, real processes) and a real SQLite store, the lever
pulled over the real admin API: the engine is launched; its EngineCore SIGKILLed is
recorded as a would-be restart with the crash's evidence and nothing restarts it (the run
stays the crashed one, no new run on record); ``POST /api/actions/act`` then restarts it
on the next decision; ``supervisor report`` counts both."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from agent_supervisor.cli import main as cli_main
from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.admin_api import TOKEN, auth
from tests.helpers.policies import fake_engine_policy
from tests.helpers.processes import titled_child
from tests.helpers.waiting import wait_for

FAST = {"tick_seconds": 0.2, "probe_timeout_seconds": 1}


def advised(reader: Store) -> list:
    return [i for i in reader.incidents() if i.action.startswith("would_")]


async def test_issue_31_a_crash_while_advising_is_advice_until_the_act_lever(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SUPERVISOR_ADMIN_TOKEN", TOKEN)
    policy = fake_engine_policy(tmp_path, sampling=FAST, mode="advise",
                                restart={"restart_delay_seconds": 0})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    reader = Store.open(policy.database_url, fleet=policy.fleet)
    task = asyncio.create_task(sup.run())
    base = f"http://127.0.0.1:{policy.admin.port}"
    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                       what="the engine launched in advise mode")
        run = sup.launcher.run
        assert run is not None
        await wait_for(lambda: titled_child(run.pid, "VLLM::EngineCore") is not None,
                       what="EngineCore")
        os.kill(titled_child(run.pid, "VLLM::EngineCore"), signal.SIGKILL)
        await wait_for(lambda: sup.launcher.state is EngineState.CRASHED, timeout=10,
                       what="the crash seen")
        t0 = time.monotonic()
        await sup.writer.flush()

        async def one_advice() -> bool:
            await sup.writer.flush()
            return bool(advised(reader))
        while not await one_advice():
            assert time.monotonic() - t0 < 10, "no would-be restart recorded"
            await asyncio.sleep(0.1)
        await asyncio.sleep(2.0)                         # ten ticks more: still nothing done
        await sup.writer.flush()
        (advice,) = advised(reader)
        assert advice.action == "would_restart" and advice.run_id == run.run_id
        assert advice.kind in ("engine_core_died", "exited")
        assert advice.explanation.startswith("advise mode, not done: ")
        assert advice.outcome == "would have: restart of mode fast in 0 s"
        crash = next(f for f in advice.findings if f["kind"] == advice.kind)
        assert crash["evidence"]["run_id"] == run.run_id       # the crash's own evidence
        assert sup.launcher.state is EngineState.CRASHED and sup.launcher.run is run
        assert [r.run_id for r in reader.runs()] == [run.run_id]     # nothing relaunched
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            st = (await client.get("/api/status")).json()
            assert st["supervision"] == "advise"
            r = await client.post("/api/actions/act", headers=auth())
            assert r.status_code == 200 and r.json()["supervision"] == "act"
        t_act = time.monotonic()
        await wait_for(lambda: sup.launcher.run is not run
                       and sup.launcher.state is EngineState.READY, timeout=20,
                       what="the act lever's restart")
        print(f"\nact lever -> new engine ready in {time.monotonic() - t_act:.1f} s")
        await sup.writer.flush()
        actions = [(i.kind, i.action) for i in reversed(reader.incidents())]
        assert actions[0] == ("supervision_mode", "advise")
        assert ("supervision_mode", "act") in actions
        assert actions.index(("supervision_mode", "act")) < actions.index(
            (advice.kind, "restart"))
        assert len(reader.runs()) == 2
    finally:
        sup.request_stop("test over")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
    assert cli_main(["report", "--policy", str(_policy_file(tmp_path, policy)),
                     "--since", "1h"]) == 0
    out = capsys.readouterr().out
    assert "would have done (advise mode, not carried out): 1 decision(s)" in out
    assert "done (act mode): 1 decision(s)" in out
    reader.close()


def _policy_file(tmp_path: Path, policy) -> Path:
    """The policy as a file (``report`` reads one): the same fleet and database."""
    import yaml

    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({
        "fleet": policy.fleet, "engine": {"executable": "/bin/true"},
        "modes": [{"name": "fast"}],
        "storage": {"state_directory": str(policy.state_directory)}}))
    return path


async def test_issue_31_a_hang_while_advising_reads_the_stacks_and_kills_nothing(
        tmp_path: Path) -> None:
    """The executor with the real launcher and a real hung process group (the stacks
    test's stand-in: two processes blocked in named functions): advising, a RESTART for
    ``engine_hung`` reads the stacks into a ``would_restart`` incident and leaves the group
    alive; acting, the same decision kills it."""
    from agent_supervisor.act.effects import Executor
    from agent_supervisor.act.processes import group_members
    from agent_supervisor.decide.decision import Action, Decision
    from agent_supervisor.decide.findings import Finding, Severity
    from tests.helpers.stacks import PY_SPY, Recorder, hung_engine, started

    launcher = hung_engine(tmp_path, 3)
    run = await started(launcher)
    recorder, mode = Recorder(), {"advise": True}
    executor = Executor(launcher.policy, launcher, recorder, poke_at=lambda s: None,
                        give_up=lambda: None, advising=lambda: mode["advise"])
    hung = Finding("engine_hung", "engine_hung", Severity.CRITICAL, "no progress for 60 s",
                   {"stall_seconds": 60}, run.run_id)
    decision = Decision(Action.RESTART, 0, "engine hung -> restart in 0 s", (hung,),
                        run_id=run.run_id)
    try:
        for _ in range(2):                                  # decided again: one record
            await executor.carry_out(decision, from_rung=0)
        (advice,) = recorder.incidents
        assert advice.action == "would_restart"
        assert len(group_members(run.pid)) == 2, "advise mode touched the hung engine"
        stacks = advice.findings[0]["evidence"]["stacks"]
        if PY_SPY is not None:
            assert "engine_loop_blocked" in " ".join(p["stack"] or ""
                                                     for p in stacks["processes"])
        mode["advise"] = False
        await executor.carry_out(decision, from_rung=0)
        assert group_members(run.pid) == []
        assert [i.action for i in recorder.incidents] == ["would_restart", "restart"]
    finally:
        await launcher.close()

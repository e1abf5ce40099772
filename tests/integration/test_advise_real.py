"""Issue 31 item 1's acceptance on the real CPU engine: in advise mode an EngineCore
SIGKILL and a SIGSTOP hang are each recorded as "would restart" with their evidence and
nothing is done (the engine stays dead, or stopped, as a plain setup would leave it);
the ``act`` lever then restarts it.

One engine life per step, one supervisor for the module (``supervisor run`` started in
advise mode by the policy's ``mode: advise``), the chaos rig's policy (stall window
15 s, tick 1 s, canary after 5 s). Steps: 1. SIGKILL the EngineCore: ``would_restart``
recorded, no new run for 8 s, the API server gone (vLLM exits 0 after its core);
``act``: a new run serves. 2. ``advise`` again; agents through the gateway; SIGSTOP the
new EngineCore: ``would_restart`` for ``engine_hung`` with the stall's evidence, the
core still stopped and no new run 8 s later; ``act``: the hung group is killed and a new
run serves.
Passed in 173 s on the 2-core box (2026-12-03): SIGKILL -> would_restart
(engine_core_died) 0.1 s after, no new run 8 s later, the old group gone by itself; act ->
new run ready 41.6 s after the lever; SIGSTOP -> would_restart (engine_hung, flat 16.0 s)
17.0 s after, the core still stopped and no new run 8 s later; act -> the hung group
killed, new run ready 35.6 s after the lever. Marked ``long`` (``make test-long``) for CI's
minutes: ``make test`` runs the same crash and hang on the stand-in engine and a real hung
process group (tests/process/test_advise.py).
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import psutil
import pytest

from agent_supervisor.act.processes import group_members
from agent_supervisor.chaos.harness import Rig

#: Seconds the supervisor is watched doing nothing after each piece of advice.
IDLE_SECONDS = 8.0


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory):
    os.environ.setdefault("SUPERVISOR_ADMIN_TOKEN", secrets.token_hex(8))
    r = Rig(Path(tmp_path_factory.mktemp("advise")) / "rig", mode="advise",
            engine={"environment": {"VLLM_CPU_KVCACHE_SPACE": "1"}})
    r.start()
    yield r
    r.close()


def advice_since(rig: Rig, t0: float, kind: str | None = None):
    """The first ``would_restart`` incident at or after ``t0`` (epoch s), of ``kind``."""
    return next((i for i in rig.incidents() if i.action == "would_restart"
                 and i.started_at.timestamp() >= t0 - 0.5
                 and (kind is None or i.kind == kind)), None)


def runs_after(rig: Rig, t0: float) -> list:
    return [r for r in rig.runs() if r.started_at.timestamp() >= t0 - 0.5]


@pytest.mark.long               # ~3 min of CI: make test-long (module docstring)
def test_issue_31_advise_records_would_restart_and_act_restarts(rig: Rig) -> None:
    run = rig.ready_run()
    pid = rig.engine_pid()
    assert rig.api("/api/status")["supervision"] == "advise"

    # 1. EngineCore SIGKILL: advice, nothing done; then act.
    t0 = time.time()
    os.kill(Rig.child(pid, "VLLM::EngineCore"), signal.SIGKILL)
    crash = rig.wait("would_restart after the SIGKILL", lambda: advice_since(rig, t0), 60)
    time.sleep(IDLE_SECONDS)
    assert runs_after(rig, t0) == [], "advise mode relaunched the engine"
    left = len(group_members(pid))          # what vLLM itself left (nothing was killed)
    assert crash.run_id == run.run_id and crash.kind in ("engine_core_died", "exited")
    assert crash.explanation.startswith("advise mode, not done: ")
    assert crash.outcome.startswith("would have: restart of mode plain8")
    print(f"\nSIGKILL: would_restart ({crash.kind}) recorded "
          f"{crash.started_at.timestamp() - t0:.1f} s after; {IDLE_SECONDS:g} s later no "
          f"new run, {left} process(es) of the old group left")
    t_act = time.time()
    assert rig.action("act")["supervision"] == "act"
    second = rig.ready_run(after=t_act)
    print(f"act lever: run {second.run_id} ready {second.ready_at.timestamp() - t_act:.1f} s "
          "after it")

    # 2. SIGSTOP hang under agents' load: advice, nothing done; then act.
    assert rig.action("advise")["supervision"] == "advise"
    pid = rig.engine_pid()
    rig.start_fleet(sessions=3)
    grace = rig.data["guards"]["engine_hung"]["ready_grace_seconds"]
    time.sleep(max(4.0, grace + 1 - (time.time() - second.ready_at.timestamp())))
    core = Rig.child(pid, "VLLM::EngineCore")
    t1 = time.time()
    os.kill(core, signal.SIGSTOP)
    hung = rig.wait("would_restart for the hang",
                    lambda: advice_since(rig, t1, "engine_hung"), 120)
    time.sleep(IDLE_SECONDS)
    assert psutil.Process(core).status() == psutil.STATUS_STOPPED, "the hung core was touched"
    assert runs_after(rig, t1) == [], "advise mode restarted the hung engine"
    evidence = next(f["evidence"] for f in hung.findings if f["kind"] == "engine_hung")
    assert evidence["flat_seconds"] >= rig.data["guards"]["engine_hung"]["stall_seconds"]
    assert evidence["canary_ok"] is False
    print(f"SIGSTOP: would_restart (engine_hung) recorded {hung.started_at.timestamp() - t1:.1f}"
          f" s after (flat {evidence['flat_seconds']} s); {IDLE_SECONDS:g} s later the core "
          "still stopped, no new run")
    t_act = time.time()
    assert rig.action("act")["supervision"] == "act"
    third = rig.ready_run(after=t_act)
    assert rig.group_gone(pid)
    restart = next(i for i in rig.incidents() if i.action == "restart"
                   and i.kind == "engine_hung" and i.started_at.timestamp() >= t_act - 0.5)
    print(f"act lever: hung group killed ({restart.outcome}), run {third.run_id} ready "
          f"{third.ready_at.timestamp() - t_act:.1f} s after it")
    rig.stop_fleet()

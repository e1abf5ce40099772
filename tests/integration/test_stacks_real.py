"""Issue 31 item 3 on the real CPU engine: a hung EngineCore's stacks are in its incident.

SIGSTOP (the chaos suite's hang) cannot be read by py-spy, so the engine runs with
``tests/helpers/hang_on_signal`` on its PYTHONPATH: SIGUSR2 to the ``VLLM::EngineCore``
blocks its busy loop in ``engine_loop_blocked``. Requests then wait on a flat heartbeat,
``/health`` stays 200, the hang guard judges it hung, and the supervisor reads every
engine process's stacks (at most ``lifecycle.stack_dump_seconds``) before it SIGKILLs the
group: the incident's evidence names ``engine_loop_blocked`` in the EngineCore's stack.
177 s on a 2-core box at load 8 (2026-12-03: verdict 16.2 s after SIGUSR2, 4 processes'
stacks read in 3.18 s of the 5 s bound, the EngineCore's naming engine_loop_blocked).
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import pytest

from agent_supervisor.chaos.harness import ROOT, Rig

# Long (make test-long, 89 s in make test on 2026-12-07); stand-in in make test: stacks of
# a hung process read before the kill (tests/process/test_stacks.py).
pytestmark = pytest.mark.long


HANG_HELPER = ROOT / "tests" / "helpers" / "hang_on_signal"
BUDGET_SECONDS = 5.0


@pytest.fixture
def rig(tmp_path: Path):
    os.environ.setdefault("SUPERVISOR_ADMIN_TOKEN", secrets.token_hex(8))
    r = Rig(tmp_path / "rig", engine={"environment": {
        "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": str(HANG_HELPER)}},
        lifecycle={"stack_dump_seconds": BUDGET_SECONDS})
    r.start()
    yield r
    r.close()


def test_issue_31_hung_engine_core_incident_carries_its_stack(rig: Rig) -> None:
    run = rig.ready_run()
    pid = rig.engine_pid()
    rig.start_fleet(sessions=3)
    grace = rig.data["guards"]["engine_hung"]["ready_grace_seconds"]
    time.sleep(max(4.0, grace + 1 - (time.time() - run.ready_at.timestamp())))
    core = Rig.child(pid, "VLLM::EngineCore")
    t0 = time.time()
    os.kill(core, signal.SIGUSR2)
    inc = rig.wait("engine_hung incident", lambda: next(
        (i for i in rig.incidents() if i.kind == "engine_hung"
         and i.started_at.timestamp() >= t0 - 0.5), None), timeout=180)
    rig.wait("the hung engine's group gone", lambda: rig.group_gone(pid), timeout=60)
    ended = rig.wait("the hung run's end", lambda: next(
        (r.ended_at for r in rig.runs() if r.run_id == run.run_id and r.ended_at), None),
        timeout=30)
    stacks = inc.findings[0]["evidence"]["stacks"]
    kill_s = ended.timestamp() - inc.started_at.timestamp()
    by_pid = {p["pid"]: p for p in stacks["processes"]}
    print(f"\nverdict {inc.started_at.timestamp() - t0:.1f} s after SIGUSR2; stacks of "
          f"{len(by_pid)} processes read in {stacks['seconds']:.2f} s; run ended "
          f"{kill_s:.2f} s after the verdict (bound {BUDGET_SECONDS:g} s + the kill)\n"
          f"{inc.explanation}")
    assert stacks["tool"] == "py-spy" and stacks["skipped"] is None
    assert core in by_pid and pid in by_pid
    assert "engine_loop_blocked" in (by_pid[core]["stack"] or ""), by_pid[core]
    assert "run_busy_loop" in by_pid[core]["stack"]
    assert "engine_loop_blocked" in inc.explanation        # the alert's excerpt
    assert stacks["seconds"] <= BUDGET_SECONDS + 0.5
    assert kill_s <= BUDGET_SECONDS + rig.data["engine"].get("kill_timeout_seconds", 10)
    rig.stop_fleet()

"""The whole service (sense -> decide -> act -> record) in-process, against the fake engine
on real processes and a real SQLite store: crashes restart, repeats step down, the last
rung gives up, a stop leaves nothing behind, leftovers of an earlier life are cleared."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from agent_supervisor.act.processes import group_members
from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for

FAST = {"tick_seconds": 0.2, "probe_timeout_seconds": 1}


def make(tmp_path: Path, modes: list[dict], **sections) -> tuple[Supervisor, Store]:
    policy = fake_engine_policy(tmp_path, modes=modes, sampling=FAST, **sections)
    store = Store.open(policy.database_url, fleet=policy.fleet)
    return Supervisor(policy, store), Store.open(policy.database_url, fleet=policy.fleet)


async def test_crash_restart_then_step_down_then_clean_stop(tmp_path: Path) -> None:
    sup, reader = make(tmp_path, [
        {"name": "fast", "args": {"--exit-after": 0.5}},      # exits 0 on its own
        {"name": "safe", "args": {"--max-num-seqs": 1}},
    ], restart={"start_limit_burst": 2, "restart_delay_seconds": 0})
    task = asyncio.create_task(sup.run())
    await wait_for(lambda: sup.ladder.rung == 1 and sup.launcher.state is EngineState.READY,
                   timeout=20, what="step down to safe and ready")
    await sup.writer.flush()
    incidents = reader.incidents()
    # The fake server exits on cue and leaves its EngineCore behind: an orphan (issue 12),
    # killed with the group; the exit itself is the next finding.
    assert [i.kind for i in incidents] == ["orphan_engine_core", "orphan_engine_core"]
    assert [i.action for i in reversed(incidents)] == ["restart", "step_down"]
    exited = next(f for f in incidents[0].findings if f["kind"] == "exited")
    assert exited["evidence"]["exit_code"] == 0
    assert incidents[0].findings[0]["evidence"]["roles"] == ["VLLM::EngineCore"]
    assert "exiting 0 on cue" in incidents[0].log_tail
    (tr,) = reader.transitions()
    assert (tr.from_mode, tr.to_mode, tr.actor) == ("fast", "safe", "guard:stop_leftovers")
    runs = reader.runs()
    assert [r.mode for r in runs] == ["safe", "fast", "fast"]
    assert "--max-num-seqs" in runs[0].argv and "--exit-after" not in runs[0].argv
    assert [r.outcome for r in runs[1:]] == ["exited", "exited"]
    pid = sup.launcher.run.pid
    sup.request_stop("test")
    assert await asyncio.wait_for(task, 15) == 0
    assert group_members(pid) == []
    (last,) = reader.runs(limit=1)
    assert last.outcome == "stopped" and last.planned_stop
    reader.close()


async def test_start_failures_back_off_step_down_and_give_up(tmp_path: Path) -> None:
    sup, reader = make(tmp_path, [
        {"name": "broken", "args": {"--fail-start": True}},
        {"name": "also-broken", "args": {"--fail-start": True}},
    ], restart={"start_limit_burst": 2, "restart_delay_seconds": 0.5})
    t0 = time.monotonic()
    code = await asyncio.wait_for(sup.run(), 30)
    assert code == 1
    runs = list(reversed(reader.runs()))
    # Bounded: exactly start_limit_burst attempts per rung, then give up.
    assert [r.mode for r in runs] == ["broken", "broken", "also-broken", "also-broken"]
    assert {r.outcome for r in runs} == {"start_failed"}
    # Not a tight loop: the second attempt of a rung waits for the backoff.
    gap = (runs[1].started_at - runs[0].ended_at).total_seconds()
    assert gap >= 0.5
    kinds = [(i.kind, i.action) for i in reversed(reader.incidents())]
    assert kinds == [("start_failed", "restart"), ("start_failed", "step_down"),
                     ("start_failed", "restart"), ("start_failed", "give_up")]
    assert "Engine core initialization failed" in reader.incidents()[0].log_tail
    assert time.monotonic() - t0 < 25


async def test_issue_12_a_bad_argument_gives_up_after_one_attempt(tmp_path: Path) -> None:
    sup, reader = make(tmp_path, [
        {"name": "broken", "args": {"--bad-flag": True}},
        {"name": "also-broken", "args": {"--bad-flag": True}},
    ], restart={"start_limit_burst": 2, "restart_delay_seconds": 0.5})
    assert await asyncio.wait_for(sup.run(), 30) == 1
    assert [r.mode for r in reader.runs()] == ["broken"]
    (incident,) = [i for i in reader.incidents() if i.severity != "info"]
    assert (incident.kind, incident.action) == ("engine_bad_argument", "give_up")
    assert "--bad-flag" in incident.explanation
    reader.close()
    reader.close()


async def test_leftover_engine_of_an_earlier_life_is_killed_at_start(tmp_path: Path) -> None:
    first, reader = make(tmp_path, [{"name": "only"}])
    task = asyncio.create_task(first.run())
    await wait_for(lambda: first.launcher.state is EngineState.READY, what="ready")
    await first.writer.flush()
    old_pid = first.launcher.run.pid
    # Simulate the supervisor dying without stopping its engine: drop it on the floor.
    first._stop.set()
    first.launcher._run = None
    first.launcher._state = EngineState.STOPPED
    await asyncio.wait_for(task, 10)
    assert group_members(old_pid) != []
    # Its own policy: another engine port, so the leftover is not this policy's engine
    # (not adoptable) and must be killed.
    second, _ = make(tmp_path, [{"name": "only"}])
    task = asyncio.create_task(second.run())
    await wait_for(lambda: second.launcher.state is EngineState.READY, what="new engine")
    assert group_members(old_pid) == []
    await second.writer.flush()
    (inc,) = reader.incidents(kind="orphaned_engine")
    assert str(old_pid) in inc.explanation
    outcomes = {r.pid: r.outcome for r in reader.runs()}
    assert outcomes[old_pid] == "orphan_killed"
    second.request_stop()
    assert await asyncio.wait_for(task, 15) == 0
    reader.close()


async def test_host_reset_starts_one_rung_down_and_is_recorded(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from agent_supervisor.record.records import AddRun, StartService, new_key

    sup, reader = make(tmp_path, [{"name": "fast"}, {"name": "safe",
                                                     "args": {"--max-num-seqs": 1}}])
    # An earlier life on another boot, with its engine open in `fast`, and no clean stop:
    # the host went down under it.
    before = datetime.now(UTC) - timedelta(hours=1)
    reader.apply(StartService(service_run_id=new_key(), pid=1, boot_id="another-boot",
                              started_at=before))
    reader.apply(AddRun(run_id="old-run", mode="fast", rung=0, argv=["x"], pid=None,
                        port=1, log_path="/nonexistent", started_at=before))
    task = asyncio.create_task(sup.run())
    await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20, what="ready")
    assert sup.launcher.run.mode == "safe"
    await sup.writer.flush()
    (inc,) = reader.incidents(kind="host_reset")
    assert inc.severity == "critical"
    (tr,) = reader.transitions()
    assert (tr.from_mode, tr.to_mode) == ("fast", "safe")
    sup.request_stop()
    assert await asyncio.wait_for(task, 15) == 0
    reader.close()

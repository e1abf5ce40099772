"""The launcher against real processes (tests/helpers/fake_engine.py, which misbehaves on
cue): readiness, planned stops, SIGKILL of survivors, crashes of every kind, cleanup."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from pathlib import Path

from agent_supervisor.act.processes import SHM_DIR, group_members
from agent_supervisor.states import CrashReason, EngineState
from tests.helpers.launcher import core_pid, launcher_for
from tests.helpers.waiting import wait_for


async def test_start_ready_stop(tmp_path: Path) -> None:
    launcher, changes = launcher_for(tmp_path)
    run = await launcher.start(rung=0)
    await wait_for(lambda: launcher.state is EngineState.READY, what="ready")
    assert run.startup_seconds is not None and run.startup_seconds < 10
    assert run.argv[-6:] == ["--host", "127.0.0.1", "--port",
                             str(launcher.policy.engine.port), "--shutdown-timeout", "1"]
    assert run.tmp_dir.is_dir()
    # vLLM's IPC socket paths (TMPDIR + a 36-char UUID) must fit in sun_path (107 bytes).
    assert len(str(run.tmp_dir)) + 37 <= 107
    # The engine is a session leader: its pid is its process group.
    assert os.getpgid(run.pid) == run.pid
    await launcher.stop()
    assert changes == [EngineState.STARTING, EngineState.READY, EngineState.STOPPING,
                       EngineState.STOPPED]
    assert run.planned_stop and run.crash_reason is None and run.exit_code == 0
    assert group_members(run.pid) == []
    assert not run.tmp_dir.exists()
    assert "SIGTERM received" in run.log_path.read_text()
    await launcher.close()


async def test_engine_that_ignores_sigterm_is_killed_with_its_orphan(tmp_path: Path) -> None:
    launcher, _ = launcher_for(tmp_path, "--ignore-sigterm", "--orphan")
    run = await launcher.start(rung=0)
    await wait_for(lambda: launcher.state is EngineState.READY)
    assert len(group_members(run.pid)) == 3
    t0 = time.monotonic()
    await launcher.stop()
    waited = time.monotonic() - t0
    # shutdown_timeout 1 s + stop_grace 1 s, then SIGKILL to the whole group.
    assert 2.0 <= waited < 8.0
    assert run.exit_signal == signal.SIGKILL
    assert group_members(run.pid) == []
    await launcher.close()


async def test_orphans_are_found_by_process_group_after_the_server_dies(tmp_path: Path) -> None:
    launcher, _ = launcher_for(tmp_path, "--orphan")
    run = await launcher.start(rung=0)
    await wait_for(lambda: launcher.state is EngineState.READY)
    os.kill(run.pid, signal.SIGKILL)          # the API server alone, as an OOM kill would
    await wait_for(lambda: launcher.state is EngineState.CRASHED, what="crash")
    assert run.crash_reason is CrashReason.EXITED and run.exit_signal == signal.SIGKILL
    assert len(group_members(run.pid)) == 2   # EngineCore and Worker live on
    await launcher.kill(reason="clear")
    assert group_members(run.pid) == []
    assert launcher.state is EngineState.STOPPED
    await launcher.close()


async def test_exit_0_without_being_asked_is_a_crash(tmp_path: Path) -> None:
    launcher, _changes = launcher_for(tmp_path, "--exit-after", "0.3", "--exit-code", "0")
    run = await launcher.start(rung=0)
    await wait_for(lambda: launcher.state is EngineState.CRASHED, what="crash")
    assert run.exit_code == 0 and run.crash_reason is CrashReason.EXITED
    assert not run.planned_stop
    await launcher.kill(reason="clear")              # its EngineCore lives on otherwise
    assert group_members(run.pid) == []
    await launcher.close()


async def test_engine_core_death_is_seen_before_the_server_exits(tmp_path: Path) -> None:
    launcher, _ = launcher_for(tmp_path)
    run = await launcher.start(rung=0)
    await wait_for(lambda: launcher.state is EngineState.READY)
    t0 = time.monotonic()
    os.kill(core_pid(run.pid), signal.SIGKILL)
    await wait_for(lambda: launcher.state is EngineState.CRASHED, what="crash")
    # The pidfd fires at once; the fake server, like vLLM, only exits 0.6 s later.
    assert time.monotonic() - t0 < 0.5
    assert run.crash_reason is CrashReason.ENGINE_CORE_DIED
    await launcher.kill(reason="clear")
    assert group_members(run.pid) == []
    await launcher.close()


async def test_a_crash_seen_first_by_the_guard_is_recorded_as_a_crash(tmp_path: Path) -> None:
    # The tick can find the EngineCore gone before the launcher's own watch fires; the
    # executor then kills with the guard's reason, and the run must not read "planned".
    launcher, _ = launcher_for(tmp_path)
    run = await launcher.start(rung=0)
    await wait_for(lambda: launcher.state is EngineState.READY)
    await launcher.kill(reason="restart: engine_core_died",
                        crash=CrashReason.ENGINE_CORE_DIED)
    assert run.crash_reason is CrashReason.ENGINE_CORE_DIED and not run.planned_stop
    await launcher.close()


async def test_bad_argument_fails_the_start(tmp_path: Path) -> None:
    launcher, _ = launcher_for(tmp_path, "--bad-flag")
    run = await launcher.start(rung=0)
    await wait_for(lambda: launcher.state is EngineState.CRASHED, what="crash")
    assert run.crash_reason is CrashReason.START_FAILED and run.exit_code == 2
    assert "unrecognized arguments" in run.log_path.read_text()
    await launcher.close()


async def test_issue_12_the_launcher_never_times_a_start_out_itself(tmp_path: Path) -> None:
    """A slow start is judged by the start-up guard on its progress, not by a deadline."""
    launcher, _ = launcher_for(tmp_path, "--ready-after", "30",
                               engine={"start_timeout_seconds": 1})
    run = await launcher.start(rung=0)
    await asyncio.sleep(2.5)
    assert launcher.state is EngineState.STARTING and run.crash_reason is None
    await launcher.kill(reason="clear", crash=CrashReason.START_TIMEOUT)
    assert run.crash_reason is CrashReason.START_TIMEOUT
    assert group_members(run.pid) == []
    await launcher.close()


async def test_missing_executable_is_a_spawn_failure(tmp_path: Path) -> None:
    launcher, _ = launcher_for(tmp_path, engine={"executable": "/nonexistent/vllm"})
    run = await launcher.start(rung=0)
    assert launcher.state is EngineState.CRASHED
    assert run.crash_reason is CrashReason.SPAWN_FAILED
    assert "cannot execute /nonexistent/vllm" in run.error
    await launcher.close()


async def test_port_in_use_is_a_spawn_failure_naming_the_owner(tmp_path: Path) -> None:
    launcher, _ = launcher_for(tmp_path)
    port = launcher.policy.engine.port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        run = await launcher.start(rung=0)
    assert run.crash_reason is CrashReason.SPAWN_FAILED
    assert f"port 127.0.0.1:{port} is already in use by pid {os.getpid()}" in run.error
    await launcher.close()


async def test_leftover_shm_files_are_removed_but_not_ones_in_use(tmp_path: Path) -> None:
    launcher, _ = launcher_for(tmp_path)
    await launcher.start(rung=0)
    await wait_for(lambda: launcher.state is EngineState.READY)
    stale = SHM_DIR / f"psm_test{os.getpid()}"
    stale.write_bytes(b"x")
    held = SHM_DIR / f"sem.mp-test{os.getpid()}"
    held.write_bytes(b"x")
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", f"import time; f = open({str(held)!r}); time.sleep(60)")
    await asyncio.sleep(0.3)
    try:
        await launcher.stop()
        assert not stale.exists()
        assert held.exists()
    finally:
        holder.kill()
        await holder.wait()
        held.unlink(missing_ok=True)
        stale.unlink(missing_ok=True)
    await launcher.close()


async def test_leftover_of_an_earlier_life_is_cleared_only_if_it_is_ours(tmp_path: Path) -> None:
    launcher, _ = launcher_for(tmp_path)
    run = await launcher.start(rung=0)
    await wait_for(lambda: launcher.state is EngineState.READY)
    # A second launcher (the service restarted) finds the group by its recorded pid.
    fresh, _ = launcher_for(tmp_path)
    assert await fresh.clear_leftover(run.run_id, run.pid, ["/not/the/same/argv"]) != []
    assert group_members(run.pid) == []
    await launcher.close()
    # A group with no engine-looking process is left alone.
    other = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; "
                                                 "time.sleep(30)", start_new_session=True)
    try:
        assert await fresh.clear_leftover("x", other.pid, ["/some/engine"]) == []
        assert group_members(other.pid) == [other.pid]
    finally:
        other.kill()
        await other.wait()

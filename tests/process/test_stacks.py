"""Issue 31 item 3, evidence before the kill: a hung engine's stacks are read before its
SIGKILL and kept with the incident, and the kill waits at most
``lifecycle.stack_dump_seconds`` for them, whether the dump tool works, is missing or
hangs.

The engine is a real Python process group (an API-server stand-in and a forked
"EngineCore" child, both blocked in ``time.sleep`` inside named functions) run by the
real launcher; the decision is a RESTART for ``engine_hung`` carried out by the real
executor. ``py-spy`` is the dev extra's (``.venv/bin/py-spy``); a test without it skips.
"""

from __future__ import annotations

import os
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from agent_supervisor.act import stack_dump
from agent_supervisor.act.effects import Executor
from agent_supervisor.act.engine_run import EngineRun
from agent_supervisor.act.incident import Incident
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.act.processes import group_members
from agent_supervisor.act.stack_dump import dump_stacks, stack_tool
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Finding, Severity
from tests.helpers.stacks import (
    SYSTEM_PATH,
    Recorder,
    hung_engine,
    needs_py_spy,
    started,
)


@pytest.fixture
def system_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """PATH without py-spy, and not the virtualenv's bin either."""
    monkeypatch.setenv("PATH", SYSTEM_PATH)
    monkeypatch.setattr(stack_dump, "EXTRA_TOOL_DIRS", ())


async def kill_as_hung(launcher: EngineLauncher, run: EngineRun) -> tuple[Incident, float]:
    """Carry out RESTART for engine_hung; returns the incident and the seconds from the
    decision to the whole group gone."""
    recorder = Recorder()
    executor = Executor(launcher.policy, launcher, recorder, poke_at=lambda s: None,
                        give_up=lambda: None)
    hung = Finding("engine_hung", "engine_hung", Severity.CRITICAL, "no progress for 60 s",
                   {"stall_seconds": 60}, run.run_id)
    t0 = time.monotonic()
    await executor.carry_out(Decision(Action.RESTART, 0, "engine hung", (hung,),
                                      run_id=run.run_id), from_rung=0)
    killed_s = time.monotonic() - t0
    assert group_members(run.pid) == []
    (incident,) = recorder.incidents
    return incident, killed_s


@needs_py_spy
async def test_dump_names_the_function_a_process_is_blocked_in(tmp_path: Path) -> None:
    launcher = hung_engine(tmp_path, 5)
    run = await started(launcher)
    incident, killed_s = await kill_as_hung(launcher, run)
    stacks = incident.findings[0]["evidence"]["stacks"]
    print(f"\nstacks read in {stacks['seconds']:.2f} s, group gone {killed_s:.2f} s after the "
          f"decision (bound 5 s): {incident.explanation}")
    assert stacks["tool"] == "py-spy" and stacks["skipped"] is None
    by_stack = " ".join(p["stack"] or "" for p in stacks["processes"])
    assert "engine_loop_blocked" in by_stack and "api_server_waiting" in by_stack
    assert len(stacks["processes"]) == 2
    assert "engine_loop_blocked" in incident.explanation      # the alert's excerpt
    assert killed_s < 5 + 2.0
    await launcher.close()


async def test_kill_is_not_delayed_when_the_dump_tool_is_missing(
        tmp_path: Path, system_path_only: None) -> None:
    launcher = hung_engine(tmp_path, 5)
    run = await started(launcher)
    incident, killed_s = await kill_as_hung(launcher, run)
    stacks = incident.findings[0]["evidence"]["stacks"]
    print(f"\nno py-spy: group gone {killed_s:.2f} s after the decision")
    assert stacks["skipped"] == "no py-spy on PATH" and stacks["processes"] == []
    assert "no stacks before the kill (no py-spy on PATH)" in incident.explanation
    assert killed_s < 2.0
    await launcher.close()


async def test_kill_waits_at_most_the_bound_for_a_dump_tool_that_hangs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, system_path_only: None) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    pids = tmp_path / "tool-pids"
    (tools / "py-spy").write_text(f"#!/bin/sh\necho $$ >> {pids}\nsleep 60\n")
    (tools / "py-spy").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{SYSTEM_PATH}")
    budget = 2.0
    launcher = hung_engine(tmp_path, budget)
    run = await started(launcher)
    incident, killed_s = await kill_as_hung(launcher, run)
    stacks = incident.findings[0]["evidence"]["stacks"]
    print(f"\npy-spy that sleeps 60 s: group gone {killed_s:.2f} s after the decision "
          f"(bound {budget:g} s)")
    assert budget - 0.1 <= killed_s < budget + 2.0
    assert [p["error"] for p in stacks["processes"]] == [
        "timed out (the dump tool was killed at the deadline)"] * 2
    tool_pids = [int(p) for p in pids.read_text().split()]
    assert len(tool_pids) == 2
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                   for p in tool_pids), "a dump tool outlived its deadline"
    await launcher.close()


@needs_py_spy
async def test_stop_whose_sigterm_is_ignored_reads_the_stacks_first(tmp_path: Path) -> None:
    launcher = hung_engine(tmp_path, 3, "--ignore-sigterm")
    run = await started(launcher)
    t0 = time.monotonic()
    await launcher.stop(reason="test")
    stopped_s = time.monotonic() - t0
    print(f"\nSIGTERM ignored: stopped in {stopped_s:.2f} s (grace 2 s + bound 3 s)")
    assert run.sigterm_ignored and run.stacks is not None
    assert any("engine_loop_blocked" in (p.stack or "") for p in run.stacks.processes)
    assert stopped_s < 2 + 3 + 2.0
    assert group_members(run.pid) == []
    await launcher.close()


@needs_py_spy
async def test_dump_of_a_gone_pid_says_why(tmp_path: Path) -> None:
    dump = await dump_stacks([2**22 + 7], engine_kind="vllm", budget_seconds=2)
    assert dump.processes[0].stack is None and dump.processes[0].error
    assert dump.seconds < 2.5


async def test_native_engine_without_a_native_tool_is_skipped() -> None:
    dump = await dump_stacks([os.getpid()], engine_kind="llama_cpp", budget_seconds=2,
                             path="/nonexistent")
    assert dump.skipped == "no eu-stack or gdb on PATH"


@pytest.mark.skipif(stack_tool("llama_cpp") is None, reason="no eu-stack or gdb")
async def test_native_engine_stacks_with_eu_stack_or_gdb(tmp_path: Path) -> None:
    native = subprocess.Popen(["sleep", "60"])
    try:
        dump = await dump_stacks([native.pid], engine_kind="llama_cpp", budget_seconds=5)
    finally:
        native.kill()
        native.wait()
    print(f"\n{dump.tool} read a native process in {dump.seconds:.2f} s")
    (proc,) = dump.processes
    assert proc.stack is not None and "sleep" in proc.stack, proc.error


@needs_py_spy
async def test_incident_time_is_the_verdict_not_the_end_of_the_dump(tmp_path: Path) -> None:
    launcher = hung_engine(tmp_path, 5)
    run = await started(launcher)
    before = datetime.now(UTC)
    incident, _ = await kill_as_hung(launcher, run)
    dumped = incident.findings[0]["evidence"]["stacks"]["seconds"]
    late = (incident.started_at - before).total_seconds()
    print(f"\nincident at +{late:.3f} s, the dump took {dumped:.2f} s")
    assert late < min(0.2, dumped)
    await launcher.close()

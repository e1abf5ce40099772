"""Live, on the CPU demo's ladder with steady traffic: the untrained MTP layer makes the
top rung slower than the calibrated no-speculation rung; the supervisor sees it, steps
down to no speculation, and the transition carries the evidence. The traffic is 16
streaming agent sessions through the gateway: across the switch not one request fails.
The run is recorded, and replaying the trace gives the decisions the live run made."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agent_supervisor.load.agents import AgentLoad
from tests.helpers.paths import ROOT
from tests.helpers.real_engine import demo_policy

# Long (make test-long, 140 s in make test on 2026-12-07): the decision is checked in make test
# on recorded figures (tests/unit/test_guards.py, the test named
# test_speculation_slower_than_plain_waits_for_calm_then_steps_to_nospec).
pytestmark = pytest.mark.long



def test_mtp_slower_than_plain_steps_down_to_nospec(tmp_path: Path, service_factory) -> None:
    policy = demo_policy(tmp_path, guards={"speculative": {
        "slower_sustain_seconds": 20, "calm_max_wait_seconds": 10}})
    cal = subprocess.run([sys.executable, "-m", "agent_supervisor", "--log-level", "warning",
                          "calibrate", "--policy", str(policy), "--modes", "nospec",
                          "--concurrency", "4", "--seconds", "10"],
                         cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert cal.returncode == 0, cal.stderr
    assert "nospec" in cal.stdout.splitlines()[1]

    trace = tmp_path / "trace.jsonl"
    svc = service_factory(policy, ["--record", str(trace)])
    # A start that fails on this shared box (a semaphore of /dev/shm gone under the
    # starting engine was seen) is retried by the supervisor: judge the ready run.
    run1 = next(r for r in svc.ready_runs(1) if r.ready_at is not None)
    assert run1.mode == "mtp2"
    stop = threading.Event()
    records = []

    def traffic() -> None:
        while not stop.is_set():
            load = AgentLoad(f"http://127.0.0.1:{svc.gateway_port}", "tiny-agent",
                             concurrency=16, context_limit_tokens=900, timeout_seconds=300)
            records.extend(asyncio.run(load.run(5)))

    thread = threading.Thread(target=traffic, daemon=True)
    thread.start()
    try:
        tr = svc.wait("step down for speed", lambda: svc.store.transitions(), timeout=240)[0]
        svc.wait("the no-speculation run ready", lambda: any(
            r.mode == "nospec" and r.ready_at is not None for r in svc.store.runs()))
        n = len(records)
        svc.wait("traffic on the new engine", lambda: len(records) > n + 16, timeout=120)
    finally:
        stop.set()
        thread.join(300)
    failed = [r for r in records if not r.ok]
    assert not failed, f"{len(failed)} of {len(records)} failed: {failed[:3]}"
    assert len(records) > 50
    assert (tr.from_mode, tr.to_mode, tr.actor) == ("mtp2", "nospec", "guard:speculative")
    incident = next(i for i in svc.store.incidents() if i.id == tr.incident_id)
    assert incident.kind == "spec_slower_than_plain" and incident.severity == "warning"
    evidence = incident.findings[0]["evidence"]
    assert evidence["baseline_mode"] == "nospec" and evidence["baseline_concurrency"] == 4
    assert evidence["tokens_per_second_per_request"] < 0.9 * evidence[
        "baseline_tokens_per_second_per_request"]
    runs = [r for r in reversed(svc.store.runs()) if r.ready_at is not None]
    assert runs[-1].mode == "nospec" and "--speculative-config" not in runs[-1].argv
    assert svc.stop() == 0

    replayed = subprocess.run([sys.executable, "-m", "agent_supervisor", "replay", str(trace),
                               "--policy", str(policy)], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
    assert replayed.returncode == 0, replayed.stdout[-3000:]
    assert "step_down" in replayed.stdout and "identical to the live run" in replayed.stdout
    keep = os.environ.get("SUPERVISOR_KEEP_TRACE")
    if keep:   # how tests/fixtures/traces/ was made
        shutil.copy(trace, Path(keep) / "cpu-demo-spec-slower.trace.jsonl")
        shutil.copy(policy, Path(keep) / "cpu-demo-spec-slower.policy.yaml")

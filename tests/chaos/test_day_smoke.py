"""Issue 20: the short day (one fault, about 2 minutes) as a smoke test of the harness,
not of its figures: the plain loop on the top rung and the supervised arm on the real CPU
engine, the fault injected, the plain loop restarting, the supervised arm recording what
happened, the report written, and no process of the run left behind (psutil).

The always-safe arm is the plain loop of always-fast on the bottom rung (``run_arm``, the
same code); the speculative crash is armed there too but never fires (the bottom rung
never speculates): one engine serving 40 s, for about a minute of CI. The three-arm table
and its acceptance are checked on recorded figures in ``tests/unit/test_fault_day.py``;
``supervisor bench --day --short`` runs all three."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from agent_supervisor.chaos.day import print_report, run_day
from agent_supervisor.chaos.day_schedule import short_day

# Long (make test-long, 155 s in make test on 2026-12-07): the harness's figures and acceptance
# are checked in make test on recorded figures (tests/unit/test_fault_day.py).
pytestmark = pytest.mark.long



def _engines_under(base: Path) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.environ().get("TMPDIR", "").startswith(str(base)):
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def test_issue_20_short_day_runs_the_fast_and_supervised_arms_and_cleans_up(tmp_path: Path) -> None:
    lines: list[str] = []
    arms = ("always-fast", "supervised")
    report, status = run_day(short_day(1), tmp_path, arms=arms, emit=lines.append)
    print_report(report, lines.append)
    print("\n".join(lines))

    assert tuple(report["arms"]) == arms
    for name, arm in report["arms"].items():
        (spec,) = arm["events"]
        assert spec["kind"] == "spec_crash", (name, spec)
        assert arm["figures"]["requests"] > 0 and arm["figures"]["tokens_delivered"] > 0, name
    # The speculative crash killed the top rung's EngineCore and the plain loop started
    # it again (its next engines crash again on their first request).
    fast = report["arms"]["always-fast"]["summary"]
    assert fast["engine_runs"] >= 2, fast
    # The supervised arm recorded the crash and the ladder skipped speculation.
    sup = report["arms"]["supervised"]["summary"]
    kinds = {i["kind"] for i in sup["incidents"]}
    assert kinds & {"engine_core_died", "exited"}, sup["incidents"]
    assert any(t["from"] == "fast" and t["to"] == "nospec" for t in sup["transitions"]), \
        sup["transitions"]

    assert report["leftover_processes"] == {a: [] for a in arms}
    assert _engines_under(tmp_path) == []
    saved = json.loads(Path(report["json_path"]).read_text())
    assert saved["exit_status"] == status
    lost = report["arms"]["supervised"]["figures"]["tasks_failed"]
    assert status == (1 if lost else 0)
    said = "\n".join(lines)
    assert all(f"\n{a}: faults spec_crash@" in said for a in arms), said

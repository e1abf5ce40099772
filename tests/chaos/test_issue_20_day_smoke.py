"""Issue 20: the short day (one fault, about 3 minutes) as a smoke test of the harness,
not of its figures: three arms on the real CPU engine, the faults injected, the plain
loop restarting, the supervised arm recording what happened, the report written, and
no process of the run left behind (psutil)."""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from supervisor.chaos.day import print_report, run_day
from supervisor.chaos.day_report import ARMS
from supervisor.chaos.day_schedule import short_day


def _engines_under(base: Path) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.environ().get("TMPDIR", "").startswith(str(base)):
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def test_issue_20_short_day_runs_every_arm_and_cleans_up(tmp_path: Path) -> None:
    lines: list[str] = []
    report, status = run_day(short_day(1), tmp_path, emit=lines.append)
    print_report(report, lines.append)
    print("\n".join(lines))

    assert list(report["arms"]) == list(ARMS)
    for name, arm in report["arms"].items():
        (spec,) = arm["events"]
        assert spec["kind"] == "spec_crash", (name, spec)
        assert arm["figures"]["requests"] > 0 and arm["figures"]["tokens_delivered"] > 0, name
    # The speculative crash killed the top rung's EngineCore and the plain loop started
    # it again (its next engines crash again on their first request); the bottom rung
    # never speculates, so its one engine served the whole day.
    fast, safe = (report["arms"][a]["summary"] for a in ("always-fast", "always-safe"))
    assert fast["engine_runs"] >= 2, fast
    assert safe["engine_runs"] == 1, safe
    # The supervised arm recorded the crash and the ladder skipped speculation.
    sup = report["arms"]["supervised"]["summary"]
    kinds = {i["kind"] for i in sup["incidents"]}
    assert kinds & {"engine_core_died", "exited"}, sup["incidents"]
    assert any(t["from"] == "fast" and t["to"] == "nospec" for t in sup["transitions"]), \
        sup["transitions"]

    assert report["leftover_processes"] == {a: [] for a in ARMS}
    assert _engines_under(tmp_path) == []
    saved = json.loads(Path(report["json_path"]).read_text())
    assert saved["exit_status"] == status
    lost = report["arms"]["supervised"]["figures"]["tasks_failed"]
    assert status == (1 if lost else 0)
    table = "\n".join(lines)
    assert "tasks completed" in table and "sup/fast" in table

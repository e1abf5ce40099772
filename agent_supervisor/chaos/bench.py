"""``supervisor bench``: the chaos table and the benchmark figures, in one command."""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agent_supervisor.chaos.extra import database_away, preemption_storm, start_failure_loop
from agent_supervisor.chaos.harness import Result, Rig
from agent_supervisor.chaos.scenarios import SEQUENCE

__all__ = ["format_table", "run_all", "run_bench", "run_sequence"]


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_table(results: list[Result]) -> str:
    """The chaos table: one row per scenario."""
    head = (f"{'scenario':44s} {'detect s':>8s} {'action':10s} {'serving s':>9s} "
            f"{'failed':>9s} {'incident':18s} ok")
    rows = [head, "-" * len(head)]
    for r in results:
        rows.append(f"{r.scenario[:44]:44s} {_fmt(r.detected_seconds):>8s} "
                    f"{(r.action or '-')[:10]:10s} {_fmt(r.serving_again_seconds):>9s} "
                    f"{f'{r.requests_failed}/{r.requests_total}':>9s} "
                    f"{(r.incident or '-')[:18]:18s} {'yes' if r.ok else 'NO'}")
    return "\n".join(rows)


def run_sequence(base: Path, emit: Callable[[str], None] = print) -> list[Result]:
    """One supervisor life through every scenario of ``SEQUENCE``, under a fleet load."""
    os.environ.setdefault("SUPERVISOR_ADMIN_TOKEN", secrets.token_hex(8))
    rig = Rig(base / "sequence")
    results = []
    try:
        rig.start()
        rig.ready_run()
        rig.start_fleet(sessions=6)
        for scenario in SEQUENCE:
            t = time.monotonic()
            res = scenario(rig)
            emit(f"  {res.scenario}: {'ok' if res.ok else 'NOT OK'} ({time.monotonic() - t:.0f} s)"
                 f" {res.extra}")
            results.append(res)
    finally:
        rig.close()
    return results


def run_all(base: Path | None = None, emit: Callable[[str], None] = print) -> list[Result]:
    """Every scenario: the sequence, then the ones that need a life of their own."""
    base = base or Path(tempfile.mkdtemp(prefix="supervisor-chaos-"))
    results = run_sequence(base, emit)
    for scenario in (start_failure_loop, preemption_storm, database_away):
        res = scenario(base)
        emit(f"  {res.scenario}: {'ok' if res.ok else 'NOT OK'} {res.extra}")
        results.append(res)
    return results


#: The benchmark scripts (repository's benchmarks/), run after the chaos table.
SCRIPTS = (("tick cost and RSS", ["benchmarks/tick_cost.py", "--load"]),
           ("gateway overhead", ["benchmarks/gateway.py"]),
           ("time to ready, restart latency", ["benchmarks/foundation.py", "--kills", "5"]))


def run_bench(*, chaos: bool = True, scripts: bool = True,
              emit: Callable[[str], None] = print) -> int:
    """``supervisor bench``: the chaos table, then every benchmark script's figures."""
    import subprocess
    import sys

    from agent_supervisor.chaos.harness import ROOT

    status = 0
    if chaos:
        emit("chaos suite (real CPU engine, agent fleet through the gateway):")
        results = run_all(emit=emit)
        emit("")
        emit(format_table(results))
        summary = switch_and_detection_summary(results)
        emit("")
        emit(summary)
        status |= 0 if all(r.ok for r in results) else 1
    if scripts:
        for title, argv in SCRIPTS:
            emit(f"\n== {title}: {' '.join(argv)}")
            proc = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True,
                                  text=True)
            emit("\n".join(line for line in proc.stdout.splitlines() if line.strip()))
            status |= proc.returncode
    return status


def switch_and_detection_summary(results: list[Result]) -> str:
    """Detection latencies and the switch overhead, from the chaos rows."""
    by = {r.scenario.split(" (")[0]: r for r in results}
    lines = ["benchmark figures from the chaos run:"]
    for r in results:
        if "restart_begun_seconds" in r.extra and "killed" in r.scenario.lower():
            lines.append(f"  crash -> restart begun: {r.extra['restart_begun_seconds']:.3f} s "
                         f"({r.scenario})")
    hang = by.get("hung engine")
    if hang is not None and hang.detected_seconds is not None:
        lines.append(f"  hang verdict: {hang.detected_seconds:.1f} s after SIGSTOP (target "
                     f"<= {hang.extra.get('target_seconds')} s)")
    mem = by.get("memory pressure")
    if mem is not None and "group_gone_after_decision_seconds" in mem.extra:
        lines.append(f"  memory floor: detected {mem.detected_seconds:.2f} s after the "
                     f"crossing, engine group gone "
                     f"{mem.extra['group_gone_after_decision_seconds']:.3f} s after the decision")
    switch = next((r for r in results if r.scenario.startswith("planned switch")), None)
    if switch is not None and "switch_overhead_seconds" in switch.extra:
        lines.append(f"  planned switch: {switch.serving_again_seconds:.1f} s in all, "
                     f"{switch.extra['switch_overhead_seconds']:.1f} s beyond the engine's own "
                     f"start-up, {switch.requests_failed} of {switch.requests_total} requests "
                     "failed")
    return "\n".join(lines)

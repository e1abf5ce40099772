"""``supervisor bench``: the chaos table and the benchmark figures, in one command."""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from supervisor.chaos.extra import database_away, preemption_storm, start_failure_loop
from supervisor.chaos.harness import Result, Rig
from supervisor.chaos.scenarios import SEQUENCE

__all__ = ["format_table", "run_all", "run_sequence"]


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

"""Guard ``memory_pressure``: PSI memory ``full`` sustained above the threshold.

``full`` is the share of wall time in which every non-idle task was stalled on memory
(Documentation/accounting/psi.rst): the box is thrashing. Step down. Pure.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.telemetry.sample import Sample

__all__ = ["GUARD", "check"]

GUARD = "memory_pressure"


def check(sit: Situation) -> list[Finding]:
    """A warning (step down) when PSI full avg10 held above the threshold."""
    cfg = sit.policy.guards.memory_pressure
    s = sit.latest
    if s is None or s.psi_memory_full_avg10_ratio is None:
        return []

    def high(x: Sample) -> bool:
        v = x.psi_memory_full_avg10_ratio
        return v is not None and v >= cfg.full_avg10_ratio

    held = sit.window.held_for(high, sit.now_s)
    if held < cfg.sustain_seconds:
        return []
    evidence = {"psi_memory_full_avg10_ratio": s.psi_memory_full_avg10_ratio,
                "threshold_ratio": cfg.full_avg10_ratio, "held_seconds": round(held, 1),
                "sustain_seconds": cfg.sustain_seconds,
                "mem_available_bytes": s.mem_available_bytes, "run_id": s.engine_run_id}
    return [Finding(GUARD, "memory_pressure", Severity.WARNING,
                    f"memory pressure: PSI full {s.psi_memory_full_avg10_ratio:.0%} for "
                    f"{held:.0f} s", evidence, s.engine_run_id, Response.STEP_DOWN)]

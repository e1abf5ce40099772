"""Guard ``thermal``: the GPU is hot, or NVML reports thermal/power throttling.

Both are warnings that shed load first (the gateway's limits), and step down if they
persist once shed. Throttling makes the engine slow, not hung; the hang guard reads
progress, never clocks. Temperature and clock-event reasons from NVML, which GB10
supports (only its memory queries are Not Supported). Pure.
"""

from __future__ import annotations

from supervisor.decide.context import Situation
from supervisor.decide.findings import Finding, Response, Severity
from supervisor.telemetry.sample import Sample

__all__ = ["GUARD", "check"]

GUARD = "thermal"


def check(sit: Situation) -> list[Finding]:
    """Warnings (shed first) for a hot or throttling GPU."""
    cfg = sit.policy.guards.thermal
    s = sit.latest
    if s is None:
        return []
    out = []
    now = sit.now_s

    def hot(x: Sample) -> bool:
        return x.gpu_temperature_c is not None and x.gpu_temperature_c >= cfg.max_temperature_c

    held = sit.window.held_for(hot, now)
    if held >= cfg.sustain_seconds:
        out.append(Finding(GUARD, "gpu_hot", Severity.WARNING,
                           f"GPU at {s.gpu_temperature_c:g} C for {held:.0f} s (limit "
                           f"{cfg.max_temperature_c:g} C)",
                           {"gpu_temperature_c": s.gpu_temperature_c,
                            "max_temperature_c": cfg.max_temperature_c,
                            "held_seconds": round(held, 1), "gpu_power_w": s.gpu_power_w,
                            "gpu_sm_clock_mhz": s.gpu_sm_clock_mhz},
                           s.engine_run_id, Response.SHED_FIRST))
    bad = set(cfg.throttle_reasons)

    def throttled(x: Sample) -> bool:
        return bool(x.gpu_clock_event_reasons and bad & set(x.gpu_clock_event_reasons))

    held = sit.window.held_for(throttled, now)
    if held >= cfg.throttle_sustain_seconds:
        reasons = sorted(bad & set(s.gpu_clock_event_reasons or ()))
        out.append(Finding(GUARD, "gpu_throttling", Severity.WARNING,
                           f"GPU throttling ({', '.join(reasons)}) for {held:.0f} s",
                           {"reasons": reasons, "held_seconds": round(held, 1),
                            "gpu_temperature_c": s.gpu_temperature_c,
                            "gpu_power_w": s.gpu_power_w, "gpu_sm_clock_mhz": s.gpu_sm_clock_mhz},
                           s.engine_run_id, Response.SHED_FIRST))
    return out

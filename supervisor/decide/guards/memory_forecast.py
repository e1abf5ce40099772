"""Guard ``memory_forecast``: MemAvailable falling toward the floor. Step down in time.

A least-squares line through MemAvailable over ``fit_seconds`` (only samples taken
``ignore_after_ready_seconds`` after the engine became ready: start-up allocation is not
a trend). Floor reached within ``horizon_seconds``: warning, step down gracefully. Within
``creep_record_seconds``: info, recorded. Pure.
"""

from __future__ import annotations

from supervisor.decide.context import Situation
from supervisor.decide.findings import Finding, Response, Severity
from supervisor.states import EngineState
from supervisor.telemetry.rates import slope

__all__ = ["GUARD", "check"]

GUARD = "memory_forecast"


def check(sit: Situation) -> list[Finding]:
    """A warning (step down) or an info (creep) finding when memory trends to the floor."""
    cfg = sit.policy.guards.memory_forecast
    floor = sit.policy.guards.memory_floor.min_available_bytes
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or s.engine_state_since_s is None:
        return []
    start = max(s.engine_state_since_s + cfg.ignore_after_ready_seconds,
                sit.now_s - cfg.fit_seconds)
    pts = [(x.t_s, float(x.mem_available_bytes)) for x in sit.run_samples()
           if x.t_s >= start and x.mem_available_bytes is not None]
    if len(pts) < cfg.min_samples or pts[-1][0] - pts[0][0] < cfg.fit_seconds / 2:
        return []
    rate = slope(pts)
    avail = pts[-1][1]
    if rate >= 0 or avail <= floor:
        return []                            # not falling, or already the floor guard's case
    eta = (avail - floor) / -rate
    evidence = {"mem_available_bytes": int(avail), "min_available_bytes": floor,
                "slope_bytes_per_second": round(rate), "seconds_to_floor": round(eta),
                "horizon_seconds": cfg.horizon_seconds, "fit_seconds": cfg.fit_seconds,
                "samples": len(pts), "run_id": s.engine_run_id}
    mib_s = -rate / 2**20
    if eta <= cfg.horizon_seconds:
        return [Finding(GUARD, "memory_forecast", Severity.WARNING,
                        f"MemAvailable falling {mib_s:.1f} MiB/s: floor in {eta:.0f} s "
                        f"(horizon {cfg.horizon_seconds:g} s)", evidence, s.engine_run_id,
                        Response.STEP_DOWN)]
    if eta <= cfg.creep_record_seconds:
        return [Finding(GUARD, "memory_creep", Severity.INFO,
                        f"MemAvailable creeping down {mib_s:.2f} MiB/s: floor in "
                        f"{eta / 3600:.1f} h", evidence, s.engine_run_id, Response.RECORD)]
    return []

"""Guard ``memory_forecast``: MemAvailable falling toward the floor. Step down in time.

A least-squares line through MemAvailable over ``fit_seconds`` (only samples taken
``ignore_after_ready_seconds`` after the engine became ready: start-up allocation is not
a trend). Floor reached within ``horizon_seconds``: warning, step down gracefully.

The slow trend (creep) is fitted over all of the run's samples in the window against the
creep floor (``creep_floor_bytes``, above the emergency floor): reached within
``creep_horizon_seconds`` (hours), a warning and a planned restart of the same rung at a
calm moment (a restart hands leaked memory back: vllm #2345's worker RSS +0.55 GB/h,
ollama #18106's 5-12 MiB per request); the floor within ``creep_record_seconds``: info,
recorded. The emergency floor stays the memory-floor guard's. Pure.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.rates import slope

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
    return _creep(sit)


def _creep(sit: Situation) -> list[Finding]:
    """The slow trend: the run's samples in the window (at least ``creep_min_seconds``)
    fitted against the creep floor: a warning and a planned restart at a calm moment
    within ``creep_horizon_seconds``, a record within ``creep_record_seconds``."""
    cfg = sit.policy.guards.memory_forecast
    floor = sit.policy.guards.memory_floor.min_available_bytes
    creep_floor = cfg.creep_floor_bytes if cfg.creep_floor_bytes is not None else 2 * floor
    s = sit.latest
    if s is None or s.engine_state_since_s is None:
        return []
    start = s.engine_state_since_s + cfg.ignore_after_ready_seconds
    pts = [(x.t_s, float(x.mem_available_bytes)) for x in sit.run_samples()
           if x.t_s >= start and x.mem_available_bytes is not None]
    if len(pts) < cfg.min_samples or pts[-1][0] - pts[0][0] < cfg.creep_min_seconds:
        return []
    rate = slope(pts)
    if rate >= 0:
        return []
    # The fitted level now, not the last (noisy) reading.
    mt = sum(t for t, _ in pts) / len(pts)
    level = sum(y for _, y in pts) / len(pts) + rate * (pts[-1][0] - mt)
    to_creep = max(level - creep_floor, 0.0) / -rate
    to_floor = max(level - floor, 0.0) / -rate
    evidence = {"mem_available_bytes": int(pts[-1][1]), "fitted_available_bytes": int(level),
                "creep_floor_bytes": creep_floor, "min_available_bytes": floor,
                "slope_bytes_per_second": round(rate, 1),
                "mib_per_hour": round(-rate * 3600 / 2**20, 1),
                "seconds_to_creep_floor": round(to_creep),
                "creep_horizon_seconds": cfg.creep_horizon_seconds,
                "fit_seconds": round(pts[-1][0] - pts[0][0]), "samples": len(pts),
                "run_id": s.engine_run_id}
    per_hour = -rate * 3600 / 2**30
    if to_creep <= cfg.creep_horizon_seconds:
        return [Finding(GUARD, "memory_creep", Severity.WARNING,
                        f"MemAvailable creeping down {per_hour:.2f} GiB/h: the creep floor "
                        f"({creep_floor / 2**30:.1f} GiB) in {to_creep / 3600:.1f} h -> a "
                        "planned restart at a calm moment", evidence, s.engine_run_id,
                        Response.RESTART_WHEN_CALM)]
    if to_floor <= cfg.creep_record_seconds:
        return [Finding(GUARD, "memory_trend", Severity.INFO,
                        f"MemAvailable creeping down {per_hour:.2f} GiB/h: floor in "
                        f"{to_floor / 3600:.1f} h", evidence, s.engine_run_id,
                        Response.RECORD)]
    return []

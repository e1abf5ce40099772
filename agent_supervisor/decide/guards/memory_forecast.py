"""Guard ``memory_forecast``: MemAvailable falling toward the floor. Step down in time.

A least-squares line through MemAvailable over ``fit_seconds`` (only samples taken
``ignore_after_ready_seconds`` after the engine became ready: start-up allocation is not
a trend). Floor reached within ``horizon_seconds``: warning, step down gracefully.

The slow trend (creep) is fitted over all of the run's samples in the window against the
creep floor (``creep_floor_bytes``, above the emergency floor): reached within
``creep_horizon_seconds`` (hours), a warning and a planned restart of the same rung at a
calm moment (a restart hands leaked memory back: vllm #2345's worker RSS +0.55 GB/h,
ollama #18106's 5-12 MiB per request); the floor within ``creep_record_seconds``: info,
recorded. The emergency floor stays the memory-floor guard's.

A leak can hide in swap: the engine's pages leave for swap, VmRSS and MemAvailable stay
flat while the tree's ``RssAnon + VmSwap`` grows (issue 29). That sum is fitted the same
way (``_swap_creep``): growing ``swap_creep_bytes_per_hour`` or faster it is recorded
(info, ``memory_trend``); when the headroom (MemAvailable above the creep floor plus free
swap) runs out within ``creep_horizon_seconds`` at that rate, the same warning and planned
restart as the creep.

A slow trend is a small slope under noise: MemAvailable flat ~2 GiB above the creep floor
with 2 % noise per reading fits slopes that reach the floor within the horizon about one
fit in three (a property test found it; issue 29). So a creep (and a swap creep) counts
only when its slope is significant: at least ``CREEP_MIN_T`` standard errors from zero,
the standard error from the fit's own residuals (``_significance``). A real leak is a line:
its residuals are small beside its decline and the fit grows surer as the window fills.
Pure.
"""

from __future__ import annotations

import math

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.policy.model import Policy
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.rates import slope
from agent_supervisor.telemetry.sample import Sample

__all__ = ["GUARD", "check", "memory_fit"]

GUARD = "memory_forecast"

#: A creep's slope must lie this many of its standard errors below zero (a t statistic).
#: Noise alone reaches 4 about once in 30,000 fits (a normal tail), but the fit is taken
#: every tick over overlapping windows: over 30 minutes of flat MemAvailable 0.5-3 GiB above
#: the creep floor with 0.5-2 % noise, t >= 4 fired in 1 run of 600 (the property test
#: found one: 1 GiB above, 1.6 % noise, t >= 4 for 0.8 GiB/h, make test 2026-12-07), t >= 5
#: in none of 600. ollama #18106's 1.7 GiB/h leak under 0-2 % noise at 20 GiB is found at
#: the first tick the fit may speak (720 s: ``ignore_after_ready_seconds`` + 600 s) in 8 of
#: 10 runs at either bound, the last two at 725-815 s (t >= 4) and 770-840 s (t >= 5)
#: (the same draws: ``benchmarks/creep_noise.py --t 4 5 --runs 600``).
CREEP_MIN_T = 5.0


def check(sit: Situation) -> list[Finding]:
    """A warning (step down) or an info (creep) finding when memory trends to the floor;
    else the engine's RssAnon + VmSwap trend (``_swap_creep``)."""
    return _forecast(sit) or _swap_creep(sit)


def _forecast(sit: Situation) -> list[Finding]:
    """MemAvailable against the floor (fast), then against the creep floor (slow)."""
    cfg = sit.policy.guards.memory_forecast
    floor = sit.policy.guards.memory_floor.min_available_bytes
    s = sit.latest
    fit = memory_fit(sit.run_samples(), sit.policy, sit.now_s)
    if s is None or fit is None:
        return []
    rate, pts = fit
    avail = pts[-1][1]
    if not rate < 0 or not avail > floor:    # NaN (a reading not finite) is neither
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


def memory_fit(run_samples: list[Sample], policy: Policy, now_s: float,
               ) -> tuple[float, list[tuple[float, float]]] | None:
    """The forecast's fit: (slope of MemAvailable in bytes/s, the (t_s, bytes) points
    fitted), or None when it would fit none: the newest sample's engine not ready, fewer
    than ``min_samples`` of its run's samples from ``ignore_after_ready_seconds`` after
    ready within ``fit_seconds`` of ``now_s``, or those spanning under half of it. Pure;
    the dashboard's caption asks this too (show/api/telemetry.py, issue 30)."""
    cfg = policy.guards.memory_forecast
    s = run_samples[-1] if run_samples else None
    if s is None or s.engine_state is not EngineState.READY or s.engine_state_since_s is None:
        return None
    start = max(s.engine_state_since_s + cfg.ignore_after_ready_seconds,
                now_s - cfg.fit_seconds)
    pts = [(x.t_s, float(x.mem_available_bytes)) for x in run_samples
           if x.t_s >= start and x.mem_available_bytes is not None]
    if len(pts) < cfg.min_samples or pts[-1][0] - pts[0][0] < cfg.fit_seconds / 2:
        return None
    return slope(pts), pts


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
    if not rate < 0 or _significance(pts, rate) < CREEP_MIN_T:
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


def _significance(pts: list[tuple[float, float]], rate: float) -> float:
    """|slope| / its standard error for the least-squares line through ``pts`` (at least
    3 points; the error from the residuals, n - 2 degrees of freedom); inf when the points
    lie on the line, 0 when the times do not spread or a value is not finite."""
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    my = sum(y for _, y in pts) / n
    var_t = sum((t - mt) ** 2 for t, _ in pts)
    if n < 3 or var_t <= 0 or not math.isfinite(rate):
        return 0.0
    residual = sum((y - my - rate * (t - mt)) ** 2 for t, y in pts)
    if not math.isfinite(residual):
        return 0.0
    se = math.sqrt(residual / (n - 2) / var_t)
    if se <= abs(rate) * 1e-9:                  # a line, up to rounding
        return math.inf if rate else 0.0
    return abs(rate) / se


def _finite(x: float | None) -> float:
    """``x``, or 0 when unknown or not finite (no headroom is claimed from it)."""
    return float(x) if x is not None and math.isfinite(x) else 0.0


def _fit(sit: Situation, start: float, field: str) -> float | None:
    """Slope (bytes/s) of Sample field ``field`` over the run's samples from ``start``."""
    pts = [(x.t_s, float(getattr(x, field))) for x in sit.run_samples()
           if x.t_s >= start and getattr(x, field) is not None]
    return slope(pts) if len(pts) >= 3 else None


def _swap_creep(sit: Situation) -> list[Finding]:
    """The engine tree's RssAnon + VmSwap growing (a leak VmRSS hides when it swaps):
    info at ``swap_creep_bytes_per_hour``, a warning and a planned restart when the
    headroom runs out within ``creep_horizon_seconds``."""
    cfg = sit.policy.guards.memory_forecast
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or s.engine_state_since_s is None:
        return []
    start = s.engine_state_since_s + cfg.ignore_after_ready_seconds
    pts = [(x.t_s, float(x.engine_rss_anon_bytes + x.engine_swap_bytes))
           for x in sit.run_samples() if x.t_s >= start
           and x.engine_rss_anon_bytes is not None and x.engine_swap_bytes is not None]
    if len(pts) < cfg.min_samples or pts[-1][0] - pts[0][0] < cfg.creep_min_seconds:
        return []
    rate = slope(pts)
    if not (math.isfinite(rate) and rate * 3600 >= cfg.swap_creep_bytes_per_hour) \
            or _significance(pts, rate) < CREEP_MIN_T:
        return []
    floor = sit.policy.guards.memory_floor.min_available_bytes
    creep_floor = cfg.creep_floor_bytes if cfg.creep_floor_bytes is not None else 2 * floor
    avail = max(_finite(s.mem_available_bytes) - creep_floor, 0.0)
    headroom = avail + _finite(s.swap_free_bytes)
    eta = headroom / rate
    rss, swap = _fit(sit, start, "engine_rss_bytes"), _fit(sit, start, "engine_swap_bytes")
    evidence = {"anon_plus_swap_bytes": int(pts[-1][1]),
                "engine_rss_anon_bytes": s.engine_rss_anon_bytes,
                "engine_swap_bytes": s.engine_swap_bytes, "engine_rss_bytes": s.engine_rss_bytes,
                "mib_per_hour": round(rate * 3600 / 2**20, 1),
                "rss_mib_per_hour": None if rss is None else round(rss * 3600 / 2**20, 1),
                "swap_mib_per_hour": None if swap is None else round(swap * 3600 / 2**20, 1),
                "mem_available_bytes": s.mem_available_bytes, "creep_floor_bytes": creep_floor,
                "swap_free_bytes": s.swap_free_bytes, "headroom_bytes": int(headroom),
                "seconds_to_headroom_gone": round(eta),
                "creep_horizon_seconds": cfg.creep_horizon_seconds,
                "fit_seconds": round(pts[-1][0] - pts[0][0]), "samples": len(pts),
                "measured_from": "RssAnon + VmSwap of the engine's processes",
                "run_id": s.engine_run_id}
    head = (f"the engine's RssAnon + VmSwap growing {rate * 3600 / 2**30:.2f} GiB/h "
            f"(VmRSS {evidence['rss_mib_per_hour']} MiB/h, swap "
            f"{evidence['swap_mib_per_hour']} MiB/h): a leak")
    if eta <= cfg.creep_horizon_seconds:
        return [Finding(GUARD, "memory_creep", Severity.WARNING,
                        f"{head}; MemAvailable above the creep floor and free swap "
                        f"({headroom / 2**30:.1f} GiB) gone in {eta / 3600:.1f} h -> a planned "
                        "restart at a calm moment", evidence, s.engine_run_id,
                        Response.RESTART_WHEN_CALM)]
    return [Finding(GUARD, "memory_trend", Severity.INFO,
                    f"{head}; headroom {headroom / 2**30:.1f} GiB lasts {eta / 3600:.1f} h",
                    evidence, s.engine_run_id, Response.RECORD)]

"""GET /api/telemetry: chart data. The live window from memory (``seconds``), or the
stored down-sampled rows (``since``), as columns keyed by field with epoch-second times."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Query

from supervisor.decide.derived import engine_rates
from supervisor.decide.guards.memory_forecast import slope
from supervisor.record.telemetry import telemetry
from supervisor.show.api.deps import ReadAccess, SupervisorDep

router = APIRouter(prefix="/api", tags=["telemetry"], dependencies=[ReadAccess])

#: Sample fields sent to the dashboard's charts.
LIVE_FIELDS = ("mem_available_bytes", "psi_memory_full_avg10_ratio", "gpu_temperature_c",
               "gpu_power_w", "kv_cache_usage_ratio", "requests_running", "requests_waiting")
RATE_STEP_SECONDS = 10.0


@router.get("/telemetry")
async def get_telemetry(sup: SupervisorDep, seconds: float = Query(900, gt=0, le=86400),
                        since: datetime | None = None) -> dict[str, Any]:
    """Columns for the charts: ``t`` (epoch seconds) and one list per field (null where
    unknown), plus ``memory_floor_bytes`` and the memory ``forecast`` (slope, time to
    the floor) the forecast guard would compute now."""
    if since is not None:
        rows = await asyncio.to_thread(telemetry, store=sup.writer.store, since=since)
        cols = ["mem_available_bytes", "psi_memory_full_avg10_ratio", "gpu_temperature_c",
                "gpu_power_w", "kv_cache_usage_ratio", "requests_running", "requests_waiting",
                "generation_tokens_per_second", "spec_acceptance_ratio"]
        return {"source": "store", "t": [r.at.timestamp() for r in rows],
                **{c: [getattr(r, c, None) for r in rows] for c in cols},
                "memory_floor_bytes": sup.policy.guards.memory_floor.min_available_bytes}
    now = time.monotonic()
    samples = [s for s in sup.window if s.t_s >= now - seconds and s.wall_s is not None]
    out: dict[str, Any] = {"source": "live", "t": [s.wall_s for s in samples]}
    for f in LIVE_FIELDS:
        out[f] = [getattr(s, f) for s in samples]
    # Rates need a span: one value per sample, over the RATE_STEP before it.
    gen, acc = [], []
    for s in samples:
        r = engine_rates(sup.window, RATE_STEP_SECONDS, s.t_s)
        gen.append(r.generation_tokens_per_second)
        acc.append(r.spec_acceptance_ratio)
    out["generation_tokens_per_second"] = gen
    out["spec_acceptance_ratio"] = acc
    floor = sup.policy.guards.memory_floor.min_available_bytes
    out["memory_floor_bytes"] = floor
    fit = sup.policy.guards.memory_forecast.fit_seconds
    pts = [(s.t_s, float(s.mem_available_bytes)) for s in samples
           if s.t_s >= now - fit and s.mem_available_bytes is not None]
    forecast = None
    if len(pts) >= 3 and pts[-1][0] > pts[0][0]:
        rate = slope(pts)
        eta = (pts[-1][1] - floor) / -rate if rate < 0 and pts[-1][1] > floor else None
        forecast = {"slope_bytes_per_second": rate, "seconds_to_floor": eta,
                    "from_t": samples[-1].wall_s, "from_bytes": pts[-1][1]}
    out["forecast"] = forecast
    return out

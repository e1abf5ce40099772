"""GET /api/telemetry: chart data. The live window from memory (``seconds``), or the
stored down-sampled rows (``since``), as columns keyed by field with epoch-second times."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Query

from agent_supervisor.policy import Policy
from agent_supervisor.record.telemetry import telemetry
from agent_supervisor.show.api.deps import ReadAccess, SupervisorDep
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.counters import counter_step
from agent_supervisor.telemetry.rates import slope
from agent_supervisor.telemetry.sample import Sample

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
        rows = await asyncio.to_thread(telemetry, store=sup.store, since=since)
        cols = ["mem_available_bytes", "psi_memory_full_avg10_ratio", "gpu_temperature_c",
                "gpu_power_w", "kv_cache_usage_ratio", "requests_running", "requests_waiting",
                "generation_tokens_per_second", "spec_acceptance_ratio"]
        return {"source": "store", "t": [r.at.timestamp() for r in rows],
                **{c: [getattr(r, c, None) for r in rows] for c in cols},
                "memory_floor_bytes": sup.policy.guards.memory_floor.min_available_bytes}
    samples = sup.samples()
    return await asyncio.to_thread(_live, samples, sup.policy, time.monotonic(), seconds)


def _rate_series(samples: list[Sample], field: str, step_s: float) -> list[float | None]:
    """Per-sample rate of the counter ``field`` over the ``step_s`` before it, in one pass
    (two pointers over cumulative growth; a drop or a new run is a counter reset)."""
    growth = [0.0] * len(samples)
    known = [False] * len(samples)
    prev = None
    for i, x in enumerate(samples):
        v = getattr(x, field)
        if v is not None:
            known[i] = True
            if prev is not None:
                growth[i] = counter_step(*prev, v, x.engine_run_id)
            prev = (v, x.engine_run_id)
    cum = []
    total = 0.0
    for g in growth:
        total += g
        cum.append(total)
    out: list[float | None] = []
    j = 0
    for i, x in enumerate(samples):
        while samples[j].t_s < x.t_s - step_s:
            j += 1
        span = x.t_s - samples[j].t_s
        out.append((cum[i] - cum[j]) / span if known[i] and known[j] and span > 0 else None)
    return out


def _live(samples: list[Sample], policy: Policy, now: float, seconds: float) -> dict[str, Any]:
    samples = [s for s in samples if s.t_s >= now - seconds and s.wall_s is not None]
    out: dict[str, Any] = {"source": "live", "t": [s.wall_s for s in samples]}
    for f in LIVE_FIELDS:
        out[f] = [getattr(s, f) for s in samples]
    out["generation_tokens_per_second"] = _rate_series(samples, "generation_tokens_total",
                                                       RATE_STEP_SECONDS)
    drafts = _rate_series(samples, "spec_decode_num_draft_tokens_total", RATE_STEP_SECONDS)
    accepted = _rate_series(samples, "spec_decode_num_accepted_tokens_total",
                            RATE_STEP_SECONDS)
    out["spec_acceptance_ratio"] = [a / d if a is not None and d else None
                                    for a, d in zip(accepted, drafts, strict=True)]
    floor = policy.guards.memory_floor.min_available_bytes
    out["memory_floor_bytes"] = floor
    out["forecast"] = _forecast(samples, policy, now)
    return out


def _forecast(samples: list[Sample], policy: Policy, now: float) -> dict[str, Any] | None:
    """The memory trend only when the forecast guard would fit one (issue 19): a ready
    engine, its own run's samples from ``ignore_after_ready_seconds`` after ready, at
    least ``min_samples`` over half of ``fit_seconds``. None otherwise (no caption)."""
    cfg = policy.guards.memory_forecast
    floor = policy.guards.memory_floor.min_available_bytes
    last = samples[-1] if samples else None
    if last is None or last.engine_state is not EngineState.READY \
            or last.engine_state_since_s is None:
        return None
    start = max(now - cfg.fit_seconds, last.engine_state_since_s + cfg.ignore_after_ready_seconds)
    pts = [(s.t_s, float(s.mem_available_bytes), s.wall_s) for s in samples
           if s.t_s >= start and s.engine_run_id == last.engine_run_id
           and s.mem_available_bytes is not None]
    forecast = None
    if len(pts) >= cfg.min_samples and pts[-1][0] - pts[0][0] >= cfg.fit_seconds / 2:
        rate = slope([(t, v) for t, v, _ in pts])
        eta = (pts[-1][1] - floor) / -rate if rate < 0 and pts[-1][1] > floor else None
        forecast = {"slope_bytes_per_second": rate, "seconds_to_floor": eta,
                    "from_t": pts[-1][2], "from_bytes": pts[-1][1]}
    return forecast

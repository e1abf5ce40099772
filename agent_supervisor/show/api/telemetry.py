"""GET /api/telemetry: chart data. The live window from memory (``seconds``), or the
stored down-sampled rows (``since``), as columns keyed by field with epoch-second times."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Query

from agent_supervisor.decide.guards.memory_forecast import memory_fit
from agent_supervisor.policy import Policy
from agent_supervisor.record.telemetry import telemetry
from agent_supervisor.show.api.deps import ReadAccess, SupervisorDep
from agent_supervisor.telemetry.rates import rate_series
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


def _live(samples: list[Sample], policy: Policy, now: float, seconds: float) -> dict[str, Any]:
    samples = [s for s in samples if s.t_s >= now - seconds and s.wall_s is not None]
    out: dict[str, Any] = {"source": "live", "t": [s.wall_s for s in samples]}
    for f in LIVE_FIELDS:
        out[f] = [getattr(s, f) for s in samples]
    out["generation_tokens_per_second"] = rate_series(samples, "generation_tokens_total",
                                                       RATE_STEP_SECONDS)
    drafts = rate_series(samples, "spec_decode_num_draft_tokens_total", RATE_STEP_SECONDS)
    accepted = rate_series(samples, "spec_decode_num_accepted_tokens_total",
                            RATE_STEP_SECONDS)
    out["spec_acceptance_ratio"] = [a / d if a is not None and d else None
                                    for a, d in zip(accepted, drafts, strict=True)]
    floor = policy.guards.memory_floor.min_available_bytes
    out["memory_floor_bytes"] = floor
    out["forecast"] = _forecast(samples, policy, now)
    return out


def _forecast(samples: list[Sample], policy: Policy, now: float) -> dict[str, Any] | None:
    """The memory trend only when the forecast guard fits one (issue 19), with the
    guard's own fit (``memory_fit``, issue 30): slope, time to the floor and where the
    line starts; None otherwise (no caption)."""
    last = samples[-1] if samples else None
    if last is None:
        return None
    run = [s for s in samples if s.engine_run_id == last.engine_run_id]
    fit = memory_fit(run, policy, now)
    if fit is None:
        return None
    rate, pts = fit
    floor = policy.guards.memory_floor.min_available_bytes
    avail = pts[-1][1]
    eta = (avail - floor) / -rate if rate < 0 and avail > floor else None
    wall = {s.t_s: s.wall_s for s in run}
    return {"slope_bytes_per_second": rate, "seconds_to_floor": eta,
            "from_t": wall[pts[-1][0]], "from_bytes": avail}

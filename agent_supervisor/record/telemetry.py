"""Down-sampled telemetry: from the Window to ``telemetry`` rows, and from 10 s to 1 min.

The service keeps every Sample in its Window (seconds apart); the store keeps one row per
10 s (``telemetry_point``, called by a 10-s job), and retention folds day-old rows into
1-min rows (``downsample``). Gauges are averaged over the stretch (unknown values
skipped, never read as 0), counters become per-second rates (``telemetry.rates``), the
tick lateness keeps its worst value, and the engine's state, mode and run are those at
the end of the stretch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from agent_supervisor.record.models import TelemetryRow
from agent_supervisor.record.records import AddTelemetry, TelemetryPoint
from agent_supervisor.record.store import Store
from agent_supervisor.telemetry.rates import engine_rates
from agent_supervisor.telemetry.window import Window

__all__ = [
    "GAUGES",
    "INTEGER_COLUMNS",
    "RATES",
    "add_telemetry",
    "downsample",
    "telemetry",
    "telemetry_point",
]

#: Sample fields averaged over a stretch (the same names in the table).
GAUGES = (
    "mem_available_bytes", "psi_memory_some_avg10_ratio", "psi_memory_full_avg10_ratio",
    "host_cpu_usage_ratio", "gpu_temperature_c", "gpu_power_w", "gpu_utilization_ratio",
    "engine_rss_bytes", "engine_pss_bytes", "health_latency_seconds", "kv_cache_usage_ratio",
    "requests_running", "requests_waiting",
)
#: ``EngineRates`` fields stored as they are (per second, ratios 0-1).
RATES = (
    "prompt_tokens_per_second", "generation_tokens_per_second", "preemptions_per_second",
    "spec_acceptance_ratio", "tokens_per_second_per_request",
)
#: Byte counts: stored as integers.
INTEGER_COLUMNS = frozenset({"mem_available_bytes", "engine_rss_bytes", "engine_pss_bytes"})
_LAST = ("mode", "rung", "engine_state", "run_id")


def _mean(values: Iterable[Any]) -> float | None:
    known = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return sum(known) / len(known) if known else None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _typed(name: str, value: float | None) -> float | int | None:
    return round(value) if value is not None and name in INTEGER_COLUMNS else value


def telemetry_point(window: Window, *, now_s: float, seconds: float = 10.0,
                    mode: str | None = None, at: datetime | None = None) -> TelemetryPoint | None:
    """One row for the Samples of the last ``seconds`` (monotonic ``now_s``). Pure.

    ``at``: the stretch's start (UTC); default the newest sample's ``wall_s`` minus the
    time since the stretch began. ``mode``: the ladder's mode now. Returns None when the
    stretch holds no sample, or no wall time is known and ``at`` is not given.
    """
    samples = window.since(now_s - seconds)
    if not samples:
        return None
    last = samples[-1]
    if at is None:
        if last.wall_s is None:
            return None
        at = datetime.fromtimestamp(last.wall_s - (last.t_s - (now_s - seconds)), UTC)
    rates = engine_rates(window, seconds, now_s)
    values: dict[str, Any] = {g: _typed(g, _mean(getattr(s, g) for s in samples))
                              for g in GAUGES}
    values.update({r: _finite(getattr(rates, r)) for r in RATES})
    lateness = [s.tick_lateness_seconds for s in samples if s.tick_lateness_seconds is not None]
    return TelemetryPoint(
        at=at, resolution_seconds=round(seconds), mode=mode, rung=last.engine_rung,
        engine_state=str(last.engine_state) if last.engine_state is not None else None,
        run_id=last.engine_run_id, tick_lateness_seconds=max(lateness) if lateness else None,
        **values)


def downsample(rows: Sequence[Any], *, resolution_seconds: int = 60) -> list[TelemetryPoint]:
    """Fold rows of one host (``TelemetryRow`` or ``TelemetryPoint``) into one point per
    ``resolution_seconds`` bucket (aligned to the epoch), oldest first. Pure.

    Numbers: the mean of the known values; tick lateness: the worst; mode, rung, state
    and run: those of the bucket's newest row.
    """
    buckets: dict[int, list[Any]] = {}
    for row in sorted(rows, key=lambda r: r.at):
        bucket = int(row.at.timestamp()) // resolution_seconds * resolution_seconds
        buckets.setdefault(bucket, []).append(row)
    out = []
    for bucket, members in sorted(buckets.items()):
        values: dict[str, Any] = {
            name: _typed(name, _mean(getattr(m, name) for m in members))
            for name in (*GAUGES, *RATES)}
        lateness = [m.tick_lateness_seconds for m in members
                    if m.tick_lateness_seconds is not None]
        values["tick_lateness_seconds"] = max(lateness) if lateness else None
        values.update({name: getattr(members[-1], name) for name in _LAST})
        out.append(TelemetryPoint(at=datetime.fromtimestamp(bucket, UTC),
                                  resolution_seconds=resolution_seconds, **values))
    return out


def add_telemetry(*, store: Store, points: Sequence[TelemetryPoint]) -> int:
    """Write telemetry rows now (one transaction); returns how many. Raises StoreError.
    The service sends ``AddTelemetry(points=...)`` through its writer instead."""
    store.apply(AddTelemetry(points=tuple(points)))
    return len(points)


def telemetry(*, store: Store, since: datetime, until: datetime | None = None,
              host: str | None = None, resolution_seconds: int | None = None,
              limit: int = 100_000) -> list[TelemetryRow]:
    """This fleet's telemetry rows in ``[since, until)``, oldest first, optionally of one
    host and one resolution."""
    with store.session() as s:
        q = select(TelemetryRow).where(TelemetryRow.fleet == store.fleet,
                                       TelemetryRow.at >= since)
        if until is not None:
            q = q.where(TelemetryRow.at < until)
        if host is not None:
            q = q.where(TelemetryRow.host == host)
        if resolution_seconds is not None:
            q = q.where(TelemetryRow.resolution_seconds == resolution_seconds)
        return list(s.scalars(q.order_by(TelemetryRow.at, TelemetryRow.id).limit(limit)))


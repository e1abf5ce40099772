"""Retention: keep the store's size bounded without losing what matters.

``run_retention`` (scheduled by the service, e.g. hourly with APScheduler):

1. folds this fleet's 10-s telemetry rows older than ``downsample_after_seconds`` (a
   day) into 1-min rows (``telemetry.downsample``), an hour of rows per transaction;
2. deletes telemetry older than ``telemetry_retention_days`` (default 30);
3. deletes incidents older than ``incident_retention_days`` (default 365) with their
   transitions, and transitions, ended engine runs and finished service lives older
   than that;
4. forgets idempotency keys (of every fleet: they are uuids) older than
   ``key_retention_days`` (default: the telemetry retention): a spooled record older
   than that is not expected to come back.

Everything is scoped to the store's fleet (fleets sharing a database each keep their
own). Times are UTC. Raises StoreError when the database refuses (nothing half-done:
every step is its own transaction).
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta

from sqlalchemy import Delete, delete, func, or_, select

from agent_supervisor.record.models import (
    AppliedRecordRow,
    EngineRunRow,
    IncidentRow,
    ModeTransitionRow,
    ServiceRunRow,
    TelemetryRow,
)
from agent_supervisor.record.store import Store
from agent_supervisor.record.telemetry import downsample

__all__ = [
    "DEFAULT_INCIDENT_RETENTION_DAYS",
    "DEFAULT_TELEMETRY_RETENTION_DAYS",
    "downsample_telemetry",
    "run_retention",
]

logger = logging.getLogger(__name__)

DEFAULT_TELEMETRY_RETENTION_DAYS = 30
DEFAULT_INCIDENT_RETENTION_DAYS = 365
FINE_SECONDS = 10
COARSE_SECONDS = 60
_CHUNK = timedelta(hours=1)
_DELETE_BATCH = 500


def downsample_telemetry(*, store: Store, before: datetime) -> tuple[int, int]:
    """Fold this fleet's 10-s rows taken before ``before`` (rounded down to the minute,
    so no minute is split) into 1-min rows. Returns (rows folded, rows made)."""
    cutoff = datetime.fromtimestamp(
        int(before.timestamp()) // COARSE_SECONDS * COARSE_SECONDS, before.tzinfo)
    fine = (TelemetryRow.fleet == store.fleet, TelemetryRow.resolution_seconds == FINE_SECONDS)
    folded = made = 0
    while True:
        with store.session() as s:
            oldest = s.scalar(select(func.min(TelemetryRow.at)).where(
                *fine, TelemetryRow.at < cutoff))
            if oldest is None:
                return folded, made
            start = datetime.fromtimestamp(
                int(oldest.timestamp()) // COARSE_SECONDS * COARSE_SECONDS, oldest.tzinfo)
            end = min(start + _CHUNK, cutoff)
            rows = list(s.scalars(select(TelemetryRow).where(
                *fine, TelemetryRow.at >= start, TelemetryRow.at < end)))
            by_host: dict[str, list[TelemetryRow]] = {}
            for row in rows:
                by_host.setdefault(row.host, []).append(row)
            points = [
                {"fleet": store.fleet, "host": host, **dataclasses.asdict(p)}
                for host, host_rows in by_host.items()
                for p in downsample(host_rows, resolution_seconds=COARSE_SECONDS)]
            ids = [row.id for row in rows]
            for i in range(0, len(ids), _DELETE_BATCH):
                s.execute(delete(TelemetryRow).where(TelemetryRow.id.in_(
                    ids[i:i + _DELETE_BATCH])).execution_options(synchronize_session=False))
            if points:
                s.execute(TelemetryRow.__table__.insert(), points)
            folded += len(rows)
            made += len(points)


def _delete(store: Store, statement: Delete) -> int:
    with store.session() as s:
        result = s.execute(statement.execution_options(synchronize_session=False))
        return int(getattr(result, "rowcount", 0) or 0)


def run_retention(
    *, store: Store, now: datetime, downsample_after_seconds: float = 86_400.0,
    telemetry_retention_days: float = DEFAULT_TELEMETRY_RETENTION_DAYS,
    incident_retention_days: float = DEFAULT_INCIDENT_RETENTION_DAYS,
    key_retention_days: float | None = None,
) -> dict[str, int]:
    """Run the four steps of the module doc at UTC ``now``; returns counts by name:
    ``telemetry_folded``, ``telemetry_minute_rows``, ``telemetry_deleted``,
    ``transitions_deleted``, ``incidents_deleted``, ``engine_runs_deleted``,
    ``service_runs_deleted``, ``keys_deleted``. Raises StoreError."""
    fleet = store.fleet
    folded, made = downsample_telemetry(
        store=store, before=now - timedelta(seconds=downsample_after_seconds))
    counts = {"telemetry_folded": folded, "telemetry_minute_rows": made}
    t_cut = now - timedelta(days=telemetry_retention_days)
    i_cut = now - timedelta(days=incident_retention_days)
    k_cut = now - timedelta(days=key_retention_days if key_retention_days is not None
                            else telemetry_retention_days)
    old_incidents = select(IncidentRow.id).where(IncidentRow.fleet == fleet,
                                                 IncidentRow.started_at < i_cut)
    counts["telemetry_deleted"] = _delete(store, delete(TelemetryRow).where(
        TelemetryRow.fleet == fleet, TelemetryRow.at < t_cut))
    counts["transitions_deleted"] = _delete(store, delete(ModeTransitionRow).where(
        ModeTransitionRow.fleet == fleet,
        or_(ModeTransitionRow.at < i_cut, ModeTransitionRow.incident_id.in_(old_incidents))))
    counts["incidents_deleted"] = _delete(store, delete(IncidentRow).where(
        IncidentRow.fleet == fleet, IncidentRow.started_at < i_cut))
    counts["engine_runs_deleted"] = _delete(store, delete(EngineRunRow).where(
        EngineRunRow.fleet == fleet, EngineRunRow.started_at < i_cut,
        EngineRunRow.ended_at.is_not(None)))
    counts["service_runs_deleted"] = _delete(store, delete(ServiceRunRow).where(
        ServiceRunRow.fleet == fleet, ServiceRunRow.started_at < i_cut,
        or_(ServiceRunRow.stopped_at.is_not(None), ServiceRunRow.heartbeat_at < i_cut)))
    counts["keys_deleted"] = _delete(store, delete(AppliedRecordRow).where(
        AppliedRecordRow.applied_at < k_cut))
    if any(counts.values()):
        logger.info("retention: %s", ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    return counts

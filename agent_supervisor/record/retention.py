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

Safe from the clock (issue 34: a forward jump of 400 days deleted the whole record):

- every cut-off is ``min(now, the newest row of that table) - retention``: a row's age is
  judged against the newest of its kind as well as the wall clock, so a clock that jumps
  ahead cannot age a table whose newest row was written before the jump;
- a step that would delete more than ``HOLD_FRACTION`` of its table's rows (of this
  fleet), and more than ``HOLD_MIN_ROWS`` rows, is held: nothing is deleted and the count
  is returned as ``<step>_held`` for the caller to record (the service records a
  ``retention_held`` incident). Normal retention deletes a sliver per run (an hourly run
  over 30 days of telemetry: 1/720); deleting most of a table at once is what a clock
  jump looks like. A hold is self-limiting: once the rows written since outnumber the old
  ones, the step goes through, so the record at most doubles while held.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Delete, and_, delete, func, or_, select
from sqlalchemy.orm import InstrumentedAttribute

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
    "HOLD_FRACTION",
    "HOLD_MIN_ROWS",
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
#: A step deleting more than this share of its table's rows, and more than
#: HOLD_MIN_ROWS rows, is held (see the module doc): half, because a normal run deletes
#: a sliver, while a clock jump or a wrong retention setting deletes nearly everything.
HOLD_FRACTION = 0.5
HOLD_MIN_ROWS = 10


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


def _newest(store: Store, column: InstrumentedAttribute[datetime],
            *scope: ColumnElement[bool]) -> datetime | None:
    with store.session() as s:
        return s.scalar(select(func.max(column)).where(*scope))


def _cut(store: Store, now: datetime, days: float, column: InstrumentedAttribute[datetime],
         *scope: ColumnElement[bool]) -> datetime:
    """``min(now, newest row in scope) - days``."""
    newest = _newest(store, column, *scope)
    return (now if newest is None else min(now, newest)) - timedelta(days=days)


class _Bounded:
    """Deletes of one run, each held when it would take most of its table (module doc).
    ``counts`` gathers ``<name>_deleted`` and, for a held step, ``<name>_held``."""

    def __init__(self, store: Store, counts: dict[str, int], *, fraction: float,
                 min_rows: int) -> None:
        self.store, self.counts = store, counts
        self.fraction, self.min_rows = fraction, min_rows

    def allowed(self, name: str, table: type, where: ColumnElement[bool],
                scope: tuple[ColumnElement[bool], ...]) -> bool:
        """Whether deleting ``where`` stays within the bound of the rows in ``scope``
        (this fleet's); records a hold in ``counts`` otherwise."""
        with self.store.session() as s:
            doomed = int(s.scalar(select(func.count()).select_from(table).where(
                *scope, where)) or 0)
            if doomed <= self.min_rows:
                return True
            total = int(s.scalar(select(func.count()).select_from(table).where(*scope)) or 0)
        if doomed <= self.fraction * total:
            return True
        self.counts[f"{name}_held"] = doomed
        logger.warning("retention held: %d of %d %s rows would go at once (more than %.0f%%);"
                       " kept", doomed, total, name, self.fraction * 100)
        return False

    def delete(self, name: str, table: type, where: ColumnElement[bool],
               scope: tuple[ColumnElement[bool], ...]) -> bool:
        """Delete ``where`` within ``scope`` unless held; sets ``<name>_deleted``."""
        self.counts[f"{name}_deleted"] = 0
        if not self.allowed(name, table, where, scope):
            return False
        self.counts[f"{name}_deleted"] = _delete(self.store, delete(table).where(*scope, where))
        return True


def _delete(store: Store, statement: Delete) -> int:
    with store.session() as s:
        result = s.execute(statement.execution_options(synchronize_session=False))
        return int(getattr(result, "rowcount", 0) or 0)


def run_retention(
    *, store: Store, now: datetime, downsample_after_seconds: float = 86_400.0,
    telemetry_retention_days: float = DEFAULT_TELEMETRY_RETENTION_DAYS,
    incident_retention_days: float = DEFAULT_INCIDENT_RETENTION_DAYS,
    key_retention_days: float | None = None,
    hold_fraction: float = HOLD_FRACTION, hold_min_rows: int = HOLD_MIN_ROWS,
) -> dict[str, int]:
    """Run the four steps of the module doc at UTC ``now``; returns counts by name:
    ``telemetry_folded``, ``telemetry_minute_rows``, ``telemetry_deleted``,
    ``transitions_deleted``, ``incidents_deleted``, ``engine_runs_deleted``,
    ``service_runs_deleted``, ``keys_deleted``, and ``<step>_held`` (rows kept) only for
    a step held by the bound (``hold_fraction``, ``hold_min_rows``). Raises StoreError."""
    fleet = store.fleet
    t_scope = (TelemetryRow.fleet == fleet,)
    t_newest = _newest(store, TelemetryRow.at, *t_scope)
    fold_ref = now if t_newest is None else min(now, t_newest)
    folded, made = downsample_telemetry(
        store=store, before=fold_ref - timedelta(seconds=downsample_after_seconds))
    counts = {"telemetry_folded": folded, "telemetry_minute_rows": made}
    bounded = _Bounded(store, counts, fraction=hold_fraction, min_rows=hold_min_rows)
    k_days = key_retention_days if key_retention_days is not None else telemetry_retention_days
    bounded.delete("telemetry", TelemetryRow, TelemetryRow.at < _cut(
        store, now, telemetry_retention_days, TelemetryRow.at, *t_scope), t_scope)
    i_scope = (IncidentRow.fleet == fleet,)
    i_old = IncidentRow.started_at < _cut(store, now, incident_retention_days,
                                          IncidentRow.started_at, *i_scope)
    old_incidents = select(IncidentRow.id).where(*i_scope, i_old)
    incidents_go = bounded.allowed("incidents", IncidentRow, i_old, i_scope)
    m_scope = (ModeTransitionRow.fleet == fleet,)
    m_old = ModeTransitionRow.at < _cut(store, now, incident_retention_days,
                                        ModeTransitionRow.at, *m_scope)
    bounded.delete("transitions", ModeTransitionRow, or_(
        m_old, ModeTransitionRow.incident_id.in_(old_incidents)) if incidents_go else m_old,
        m_scope)
    if incidents_go:
        bounded.delete("incidents", IncidentRow, i_old, i_scope)
    else:
        counts["incidents_deleted"] = 0
    e_scope = (EngineRunRow.fleet == fleet,)
    bounded.delete("engine_runs", EngineRunRow, and_(EngineRunRow.started_at < _cut(
        store, now, incident_retention_days, EngineRunRow.started_at, *e_scope),
        EngineRunRow.ended_at.is_not(None)), e_scope)
    s_scope = (ServiceRunRow.fleet == fleet,)
    s_cut = _cut(store, now, incident_retention_days, ServiceRunRow.started_at, *s_scope)
    bounded.delete("service_runs", ServiceRunRow, and_(ServiceRunRow.started_at < s_cut, or_(
        ServiceRunRow.stopped_at.is_not(None), ServiceRunRow.heartbeat_at < s_cut)), s_scope)
    bounded.delete("keys", AppliedRecordRow, AppliedRecordRow.applied_at < _cut(
        store, now, k_days, AppliedRecordRow.applied_at), ())
    if any(counts.values()):
        logger.info("retention: %s", ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    return counts

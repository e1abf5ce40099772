"""Reads for the command line and the admin API: one incident, the mode timeline, runs.

All scoped to the store's fleet; times are UTC-aware datetimes. Raises StoreError when
the database refuses.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from agent_supervisor.record.models import EngineRunRow, IncidentRow, ModeTransitionRow
from agent_supervisor.record.store import Store

__all__ = ["engine_runs", "incident", "incident_transitions", "timeline"]


def incident(*, store: Store, incident_id: int) -> IncidentRow | None:
    """The incident ``incident_id`` of this fleet, or None."""
    with store.session() as s:
        return s.scalars(select(IncidentRow).where(
            IncidentRow.fleet == store.fleet, IncidentRow.id == incident_id)).first()


def incident_transitions(*, store: Store, incident_id: int) -> list[ModeTransitionRow]:
    """The mode transitions an incident caused, oldest first."""
    with store.session() as s:
        return list(s.scalars(select(ModeTransitionRow).where(
            ModeTransitionRow.fleet == store.fleet,
            ModeTransitionRow.incident_id == incident_id).order_by(ModeTransitionRow.at)))


def timeline(*, store: Store, since: datetime | None = None, until: datetime | None = None,
             limit: int = 1000) -> list[ModeTransitionRow]:
    """This fleet's mode transitions in ``[since, until)``, oldest first (the newest
    ``limit`` of them)."""
    with store.session() as s:
        q = select(ModeTransitionRow).where(ModeTransitionRow.fleet == store.fleet)
        if since is not None:
            q = q.where(ModeTransitionRow.at >= since)
        if until is not None:
            q = q.where(ModeTransitionRow.at < until)
        q = q.order_by(ModeTransitionRow.at.desc(), ModeTransitionRow.id.desc()).limit(limit)
        return list(reversed(list(s.scalars(q))))


def engine_runs(*, store: Store, since: datetime | None = None,
                limit: int = 1000) -> list[EngineRunRow]:
    """This fleet's engine runs started since ``since``, newest first."""
    with store.session() as s:
        q = select(EngineRunRow).where(EngineRunRow.fleet == store.fleet)
        if since is not None:
            q = q.where(EngineRunRow.started_at >= since)
        return list(s.scalars(q.order_by(EngineRunRow.id.desc()).limit(limit)))

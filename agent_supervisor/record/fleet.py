"""The fleet view: every supervisor writing to one database, newest life of each.

Several supervisors (one per box, or per pair of boxes running one engine) share one
PostgreSQL; every row carries the fleet and the host name (``storage.host_name``). A
supervisor's life is a ``service_runs`` row whose heartbeat (``storage.heartbeat_seconds``)
also carries the rung, mode and engine state. This module reads, per (fleet, host), the
newest life and the newest incident, for ``supervisor fleet`` and the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from agent_supervisor.record.models import IncidentRow, ServiceRunRow

__all__ = ["FleetMember", "fleet_members"]


@dataclass(frozen=True)
class FleetMember:
    """One supervisor as the record last saw it (times UTC; None: never written).

    ``heartbeat_age_seconds`` is measured against ``now`` given to ``fleet_members``;
    ``stopped``: its newest life wrote the clean-stop marker.
    """

    fleet: str
    host: str
    started_at: datetime
    heartbeat_at: datetime | None
    heartbeat_age_seconds: float | None
    stopped: bool
    rung: int | None
    mode: str | None
    engine_state: str | None
    version: str | None
    last_incident_kind: str | None = None
    last_incident_severity: str | None = None
    last_incident_at: datetime | None = None
    last_incident_node: str | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (times ISO 8601)."""
        out: dict[str, object] = {}
        for key, value in self.__dict__.items():
            out[key] = value.isoformat() if isinstance(value, datetime) else value
        return out


def fleet_members(session: Session, *, now: datetime,
                  fleet: str | None = None) -> list[FleetMember]:
    """The newest life of every (fleet, host) in the database (only ``fleet``'s when
    given), with its last incident; sorted by fleet, then host."""
    newest = (select(ServiceRunRow.fleet, ServiceRunRow.host,
                     func.max(ServiceRunRow.id).label("id"))
              .group_by(ServiceRunRow.fleet, ServiceRunRow.host))
    if fleet is not None:
        newest = newest.where(ServiceRunRow.fleet == fleet)
    ids = [row.id for row in session.execute(newest)]
    lives = session.scalars(select(ServiceRunRow).where(ServiceRunRow.id.in_(ids))).all()
    out = []
    for life in sorted(lives, key=lambda r: (r.fleet, r.host)):
        incident = session.scalars(
            select(IncidentRow).where(IncidentRow.fleet == life.fleet,
                                      IncidentRow.host == life.host)
            .order_by(IncidentRow.started_at.desc(), IncidentRow.id.desc()).limit(1)).first()
        age = None if life.heartbeat_at is None else \
            max(0.0, (now - life.heartbeat_at).total_seconds())
        out.append(FleetMember(
            fleet=life.fleet, host=life.host, started_at=life.started_at,
            heartbeat_at=life.heartbeat_at, heartbeat_age_seconds=age,
            stopped=life.stopped_at is not None, rung=life.rung, mode=life.mode,
            engine_state=life.engine_state, version=life.version,
            last_incident_kind=None if incident is None else incident.kind,
            last_incident_severity=None if incident is None else incident.severity,
            last_incident_at=None if incident is None else incident.started_at,
            last_incident_node=None if incident is None else incident.node))
    return out

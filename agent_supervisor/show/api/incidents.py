"""GET /api/incidents and /api/incidents/{id}: the record, newest first, with evidence."""

from __future__ import annotations

import asyncio
from datetime import datetime

from fastapi import APIRouter, HTTPException, Query

from agent_supervisor.record.models import IncidentRow
from agent_supervisor.record.queries import incident
from agent_supervisor.show.api.deps import ReadAccess, SupervisorDep
from agent_supervisor.show.api.models import IncidentOut
from agent_supervisor.show.probe_lines import hide_probe_lines

router = APIRouter(prefix="/api/incidents", tags=["incidents"], dependencies=[ReadAccess])


def _out(row: IncidentRow, *, full: bool, probes: bool = False) -> IncidentOut:
    tail, hidden = row.log_tail if full else None, 0
    if tail and not probes:
        kept, hidden = hide_probe_lines(tail + "\n")
        tail = kept.removesuffix("\n")
    return IncidentOut(
        id=row.id, kind=row.kind, severity=row.severity, started_at=row.started_at,
        ended_at=row.ended_at, mode=row.mode, action=row.action, outcome=row.outcome,
        explanation=row.explanation, run_id=row.run_id, findings=row.findings or [],
        kernel_lines=row.kernel_lines if full else None,
        log_tail=tail, log_tail_probe_lines_hidden=hidden)


@router.get("", response_model=list[IncidentOut])
async def list_incidents(sup: SupervisorDep, since: datetime | None = None,
                         kind: str | None = None,
                         limit: int = Query(100, ge=1, le=1000)) -> list[IncidentOut]:
    """Incidents, newest first, with their findings (log tails: see the detail)."""
    rows = await asyncio.to_thread(sup.store.incidents, since=since, kind=kind,
                                   limit=limit)
    return [_out(r, full=False) for r in rows]


@router.get("/{incident_id}", response_model=IncidentOut)
async def get_incident(sup: SupervisorDep, incident_id: int,
                       probes: bool = False) -> IncidentOut:
    """One incident in full: findings with evidence, kernel lines, the engine's log tail
    (the supervisor's own probe lines left out unless ``probes``)."""
    row = await asyncio.to_thread(incident, store=sup.store, incident_id=incident_id)
    if row is None:
        raise HTTPException(404, f"no incident {incident_id}")
    return _out(row, full=True, probes=probes)

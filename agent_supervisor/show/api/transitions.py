"""GET /api/transitions: the mode timeline."""

from __future__ import annotations

import asyncio
from datetime import datetime

from fastapi import APIRouter, Query

from agent_supervisor.record.queries import timeline
from agent_supervisor.show.api.deps import ReadAccess, SupervisorDep
from agent_supervisor.show.api.models import TransitionOut

router = APIRouter(prefix="/api/transitions", tags=["transitions"], dependencies=[ReadAccess])


@router.get("", response_model=list[TransitionOut])
async def list_transitions(sup: SupervisorDep, since: datetime | None = None,
                           limit: int = Query(200, ge=1, le=5000)) -> list[TransitionOut]:
    """Mode transitions, oldest first: when, from, to, who and why."""
    rows = await asyncio.to_thread(timeline, store=sup.store, since=since, limit=limit)
    return [TransitionOut(id=r.id, at=r.at, from_mode=r.from_mode, to_mode=r.to_mode,
                          actor=r.actor, reason=r.reason, incident_id=r.incident_id)
            for r in rows]

"""GET /api/status: where the ladder stands, what the engine does, the last decision."""

from __future__ import annotations

from fastapi import APIRouter

from agent_supervisor.show.api.deps import ReadAccess, SupervisorDep
from agent_supervisor.show.api.models import StatusOut

router = APIRouter(prefix="/api", tags=["status"], dependencies=[ReadAccess])


@router.get("/status", response_model=StatusOut)
async def status(sup: SupervisorDep) -> StatusOut:
    """Mode, rung, the ladder, engine state and the last decision with its explanation."""
    return sup.status()

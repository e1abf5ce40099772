"""GET /api/fleet: every supervisor that writes to this service's database (issue 16)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter

from agent_supervisor.record.fleet import fleet_members
from agent_supervisor.show.api.deps import ReadAccess, SupervisorDep

router = APIRouter(prefix="/api/fleet", tags=["fleet"], dependencies=[ReadAccess])


def _members(sup: SupervisorDep) -> list[dict[str, Any]]:
    store = sup.store
    with store.session() as s:
        members = fleet_members(s, now=datetime.now(UTC))
    return [{**m.to_dict(), "this": m.host == store.host and m.fleet == store.fleet}
            for m in members]


@router.get("")
async def list_fleet(sup: SupervisorDep) -> dict[str, Any]:
    """Every (fleet, host) on record: rung, mode, engine state, heartbeat age, last
    incident; ``this`` marks the supervisor answering. The dashboard shows them when
    there is more than one host."""
    members = await asyncio.to_thread(_members, sup)
    return {"members": members, "hosts": len({m["host"] for m in members})}

"""POST /api/actions/{action}: the operator's levers. Bearer token required."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from agent_supervisor.show.api.deps import SupervisorDep, TokenAccess
from agent_supervisor.show.api.models import ActionIn

router = APIRouter(prefix="/api/actions", tags=["actions"], dependencies=[TokenAccess])

ACTIONS = ("pin", "unpin", "step-down", "step-up", "pause", "resume", "restart", "act",
           "advise")


@router.post("/{action}")
async def act(sup: SupervisorDep, action: str, body: ActionIn | None = None) -> dict[str, Any]:
    """pin (body: mode), unpin, step-down, step-up (one rung, once), pause, resume,
    restart (drain and restart the current mode); act, advise (carry decisions out, or
    only record what they would have done: issue 31)."""
    if action not in ACTIONS:
        raise HTTPException(404, f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    mode = body.mode if body else None
    if action == "pin" and not mode:
        raise HTTPException(422, "pin needs {\"mode\": NAME}")
    try:
        ladder = sup.operate(action, mode)
    except KeyError as exc:
        raise HTTPException(422, f"no mode {mode!r} in this policy") from exc
    except ValueError as exc:
        raise HTTPException(409, str(exc)) from exc
    names = [m.name for m in sup.policy.modes]
    return {"action": action, "mode": names[ladder.rung],
            "pinned": None if ladder.pinned is None else names[ladder.pinned],
            "requested": None if ladder.requested is None else names[ladder.requested],
            "paused": ladder.paused, "supervision": sup.status().supervision}

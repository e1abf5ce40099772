"""GET /api/engine/starts?mode=M: how long the engine usually takes to serve in mode M,
from the recorded starts of earlier runs on this host (issue 33: at 3 a.m. a starting
engine said only "starting for 40 s", never whether that was long)."""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

from fastapi import APIRouter, Query

from agent_supervisor.show.api.deps import ReadAccess, SupervisorDep

router = APIRouter(prefix="/api/engine", tags=["engine"], dependencies=[ReadAccess])

#: The newest starts of a mode the estimate is taken from: recent enough to follow an
#: engine update or a new model cache, many enough that one slow start does not decide.
RECENT_STARTS = 10


def usual_start(durations: list[tuple[str, float]], mode: str) -> dict[str, Any]:
    """``starts`` (how many of ``mode``'s newest successful starts were used) and
    ``usual_seconds``, their median (None without any); ``max_seconds``, the longest."""
    own = [seconds for m, seconds in durations if m == mode][-RECENT_STARTS:]
    return {"mode": mode, "starts": len(own),
            "usual_seconds": round(statistics.median(own), 1) if own else None,
            "max_seconds": round(max(own), 1) if own else None}


@router.get("/starts")
async def engine_starts(sup: SupervisorDep, mode: str = Query(min_length=1)) -> dict[str, Any]:
    """The usual time from launch to ready of ``mode`` (median of its newest starts here;
    ``usual_seconds`` None when it has never served)."""
    durations = await asyncio.to_thread(sup.store.start_durations)
    return usual_start(durations, mode)

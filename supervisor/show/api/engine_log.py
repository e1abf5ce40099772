"""GET /api/engine/log: the running engine's log file, read from a byte offset (for
``supervisor logs -f``) or its last lines."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Query

from supervisor.show.api.deps import ReadAccess, SupervisorDep

router = APIRouter(prefix="/api/engine", tags=["engine"], dependencies=[ReadAccess])

#: The most bytes one answer carries (a follower asks again from the new offset).
MAX_BYTES = 256 * 1024


def read_log(path: Path, offset: int | None, lines: int) -> tuple[str, int, int]:
    """(text, offset after it, file size) of ``path``: from byte ``offset`` (at most
    MAX_BYTES), or its last ``lines`` lines when ``offset`` is None. An offset past the
    end (the file was replaced) starts over at 0. A missing file reads as empty."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if offset is None:
                start = max(0, size - MAX_BYTES)
                f.seek(start)
                data = f.read()
                keep = data.split(b"\n")
                tail = b"\n".join(keep[-(lines + 1):]) if data.endswith(b"\n") \
                    else b"\n".join(keep[-lines:])
                return tail.decode("utf-8", errors="replace"), size, size
            start = 0 if offset > size else offset
            f.seek(start)
            data = f.read(MAX_BYTES)
    except FileNotFoundError:
        return "", 0, 0
    return data.decode("utf-8", errors="replace"), start + len(data), size


@router.get("/log")
async def engine_log(sup: SupervisorDep, offset: int | None = Query(None, ge=0),
                     lines: int = Query(50, ge=0, le=5000)) -> dict[str, Any]:
    """The engine's log: ``text`` from byte ``offset`` on, or its last ``lines`` lines;
    ``offset`` in the answer is where to ask next; ``run_id`` tells a new run."""
    current = sup.engine_log()
    if current is None:
        raise HTTPException(404, "no engine run yet")
    run_id, mode, path = current
    text, next_offset, size = await asyncio.to_thread(read_log, path, offset, lines)
    return {"run_id": run_id, "mode": mode, "path": str(path), "offset": next_offset,
            "size": size, "text": text}

"""GET /api/engine/log: the running engine's log file, read from a byte offset (for
``supervisor logs -f``) or its last lines; GET /api/engine/log/stream: the same, live, as
server-sent events (the dashboard's log view).

Both leave out the supervisor's own probe lines (``show/probe_lines.py``, issue 33:
``GET /health`` and ``/metrics`` from 127.0.0.1 filled the pane) and say how many they
hid (``probe_lines_hidden``); ``?probes=true`` gives the log as the engine wrote it.

The stream is plain ``text/event-stream`` behind the same read check as every read (the
bearer token where reads need one): the dashboard reads it with ``fetch()`` and a
``ReadableStream``, which can send the Authorization header (``EventSource`` cannot).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import StreamingResponse

from agent_supervisor.show.api.deps import ReadAccess, SupervisorDep
from agent_supervisor.show.probe_lines import hide_probe_lines, tail_without_probes

router = APIRouter(prefix="/api/engine", tags=["engine"], dependencies=[ReadAccess])

#: The most bytes one answer carries (a follower asks again from the new offset).
MAX_BYTES = 256 * 1024
#: How often the stream looks at the log file for new bytes or a new run. A quarter
#: second: a line shows up at once to a reader, and the check is one stat-and-read.
STREAM_CHECK_SECONDS = 0.25
#: A comment line this often keeps proxies and the reader from timing the stream out.
STREAM_KEEPALIVE_SECONDS = 15.0
#: Lines read for a tail without probes: enough that ``lines`` remain when most are
#: probe lines (the read stays within MAX_BYTES).
TAIL_READ_LINES = 5000


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
                     lines: int = Query(50, ge=0, le=5000),
                     probes: bool = False) -> dict[str, Any]:
    """The engine's log: ``text`` from byte ``offset`` on, or its last ``lines`` lines;
    ``offset`` in the answer is where to ask next; ``run_id`` tells a new run; the
    supervisor's probe lines left out (``probe_lines_hidden``) unless ``probes``."""
    current = sup.engine_log()
    if current is None:
        raise HTTPException(404, "no engine run yet")
    run_id, mode, path = current
    text, next_offset, size, hidden = await asyncio.to_thread(read_view, path, offset,
                                                               lines, probes)
    return {"run_id": run_id, "mode": mode, "path": str(path), "offset": next_offset,
            "size": size, "text": text, "probe_lines_hidden": hidden}


def read_view(path: Path, offset: int | None, lines: int,
              probes: bool) -> tuple[str, int, int, int]:
    """``read_log`` with the probe lines left out unless ``probes``: (text, offset after
    it, file size, probe lines hidden)."""
    if probes:
        return (*read_log(path, offset, lines), 0)
    if offset is None:
        text, next_offset, size = read_log(path, None, TAIL_READ_LINES)
        kept, hidden = tail_without_probes(text, lines)
        return kept, next_offset, size, hidden
    text, next_offset, size = read_log(path, offset, lines)
    kept, hidden = hide_probe_lines(text)
    return kept, next_offset, size, hidden


def _event(name: str, data: dict[str, Any]) -> bytes:
    """One server-sent event: ``event: NAME`` and its JSON ``data`` line."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


async def log_events(sup: Any, request: Request, lines: int,
                     probes: bool = False) -> AsyncIterator[bytes]:
    """The events of one stream: ``run`` (a run's last ``lines`` lines, at the start and
    whenever the engine run changes: the reader starts its view over), then ``append``
    (the bytes added since, ``text`` and the new ``offset``); a ``: keepalive`` comment
    when quiet; each with ``probe_lines_hidden``, the probe lines left out of its text
    (none when ``probes``). Ends when the reader goes away."""
    run_id, offset, quiet_since = None, 0, time.monotonic()
    while not await request.is_disconnected():
        current = sup.engine_log()
        if current is not None and current[0] != run_id:
            run_id, mode, path = current
            text, offset, size, hidden = await asyncio.to_thread(read_view, path, None,
                                                                 lines, probes)
            yield _event("run", {"run_id": run_id, "mode": mode, "path": str(path),
                                 "offset": offset, "size": size, "text": text,
                                 "probe_lines_hidden": hidden})
            quiet_since = time.monotonic()
        elif current is not None:
            before = offset
            text, offset, _, hidden = await asyncio.to_thread(read_view, current[2], offset,
                                                              0, probes)
            if offset != before:
                yield _event("append", {"run_id": run_id, "offset": offset, "text": text,
                                        "probe_lines_hidden": hidden})
                quiet_since = time.monotonic()
        if time.monotonic() - quiet_since >= STREAM_KEEPALIVE_SECONDS:
            yield b": keepalive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(STREAM_CHECK_SECONDS)


@router.get("/log/stream")
async def engine_log_stream(request: Request, sup: SupervisorDep,
                            lines: int = Query(100, ge=0, le=5000),
                            probes: bool = False) -> StreamingResponse:
    """The engine's log, live, as server-sent events (``run``, then ``append``)."""
    return StreamingResponse(log_events(sup, request, lines, probes),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

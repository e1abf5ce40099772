"""``_status(max_concurrency)``: an /api/status document as the service answers it (one
request in flight at the gateway), for the command tests."""

from __future__ import annotations


def _status(max_concurrency: int | None) -> dict:
    gateway = {"requests_in_flight": 1, "requests_queued": 0,
               "max_concurrency": max_concurrency}
    return {"fleet": "f", "mode": "fast", "rung": 0, "ladder": [], "engine_state": "ready",
            "engine_seconds_in_state": 3.0, "engine_run_id": None, "engine_pid": None,
            "uptime_seconds": 9.0, "calm_seconds": 0.0, "pinned": None, "paused": False,
            "memory": {"mem_available_bytes": None, "memory_floor_bytes": None,
                       "headroom_bytes": None},
            "in_flight": {"engine_requests_running": None, "engine_requests_waiting": None,
                          "gateway": gateway}}

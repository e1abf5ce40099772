"""``load_of``: how many requests the engine holds, from one Sample."""

from __future__ import annotations

from agent_supervisor.telemetry.sample import Sample

__all__ = ["load_of"]


def load_of(x: Sample) -> float | None:
    """Requests the engine holds: its own running + waiting gauges, or what the gateway
    has in flight to it, whichever is more (None when neither is known).

    vLLM's gauges are set from the engine core's step reports: on the CPU engine they read
    0 at most ticks under steady load, and they freeze when the core stops (SIGSTOP), so
    the gateway's exact count is the better signal when there is one.
    """
    engine = None
    if x.requests_running is not None and x.requests_waiting is not None:
        engine = x.requests_running + x.requests_waiting
    known = [v for v in (engine, x.gateway_requests_in_flight) if v is not None]
    return max(known) if known else None

"""Where the proxy hands a waiting request to the failover (issue 31 item 5): the two
waits of a generation request that has not started streaming from the local engine.

1. ``admit``: the wait for a slot (``Admission.acquire``; while the engine is held every
   request queues there). Raced against the failover: once engaged
   (agent_supervisor/gateway/failover.py), the request goes to a fallback instead.
2. ``wait_back``: the wait for the engine to come back before a whole re-send (a request
   cut before any byte reached its client, agent_supervisor/gateway/proxy.py
   ``_forward``). Raced the same way.

A stream already passing the local engine's events to its client never comes here: it
is resumed on the local engine (agent_supervisor/gateway/streaming.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from agent_supervisor.gateway.admission import Slot
from agent_supervisor.gateway.failover import FallbackAnswer
from agent_supervisor.gateway.visibility import answer_headers

if TYPE_CHECKING:
    from agent_supervisor.gateway.view import GatewayView

__all__ = ["admit", "wait_back"]


def _divert(gw: GatewayView, request: Request, path: str, raw: bytes, body: dict[str, Any],
            t0: float, done: Callable[[], None] | None,
            ) -> Callable[[], Awaitable[FallbackAnswer | None]]:
    async def divert() -> FallbackAnswer | None:
        return await gw.failover.send(
            request.method, path, request.scope["query_string"].decode(), raw, body,
            list(request.headers.items()),
            lambda: answer_headers(gw, held_seconds=time.monotonic() - t0, resumed=False),
            done)
    return divert


async def admit(gw: GatewayView, request: Request, path: str, raw: bytes,
                body: dict[str, Any], tokens: int,
                key_back: Callable[[], None] | None) -> float | FallbackAnswer:
    """A slot for the request (the seconds it waited, as ``Admission.acquire``, which
    raises as there), or, once the failover is engaged, a fallback's answer (which gives
    back ``key_back`` when it ends): at once when failed over already (the request never
    queues, so ``max_held_requests`` does not refuse it). Without a fallback for ``path``,
    or with a slot free now (the engine serving, nothing queued: the hot path),
    ``acquire`` alone."""
    a = gw.admission
    limit = a.max_concurrency
    at_once = not a.held and not a.queued and (limit is None or a.in_flight < limit)
    if at_once or not gw.failover.covers(path):    # a slot now: nothing to race
        return await a.acquire(tokens, len(raw))
    divert = _divert(gw, request, path, raw, body, time.monotonic(), key_back)
    if gw.failover.engaged:           # failed over already: straight there, not queued
        answer = await divert()
        if answer is not None:
            return answer
    return await gw.failover.admit(a.acquire(tokens, len(raw)),
                                   lambda: a.give_back(tokens), divert)


async def wait_back(gw: GatewayView, request: Request, path: str, epoch: int,
                    slot: Slot | None, original: tuple[bytes, dict[str, Any]] | None,
                    held_s: float) -> bool | FallbackAnswer:
    """``gw.wait_engine(epoch)``, or once the failover is engaged a fallback's answer to
    ``original`` (the request's body before any resumption plan rewrote it); the slot is
    given back then. ``held_s``: seconds the request waited before."""
    if original is None or slot is None or not gw.failover.covers(path):
        return await gw.wait_engine(epoch)
    raw, body = original
    t0 = time.monotonic() - held_s
    got = await gw.failover.wait_or_divert(gw.wait_engine(epoch),
                                           _divert(gw, request, path, raw, body, t0, None))
    if isinstance(got, FallbackAnswer):
        await slot.aclose()
    return got

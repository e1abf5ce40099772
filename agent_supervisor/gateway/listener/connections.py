"""The gateway's client connections: the bounded protocol every listener uses
(agent_supervisor/serve_limits.py: connection cap, header and body caps and timeouts, idle
and write timeouts, lingering after an early answer) plus two things only the proxy needs.

It tells a proxied request that its client left: a request's task put in its scope
under ``CLIENT_TASK`` is cancelled when the connection is lost before the response is
complete, with ``CLIENT_GONE`` set in the scope (uvicorn itself only makes ``receive``
answer ``http.disconnect``, and its ``send`` drops what a gone client would have got).
That replaces a task per request listening on ``receive`` (Starlette's
``StreamingResponse`` runs one per stream as well): two task switches and a cancel that
every request paid for.

And its transport coalesces a response's head with what follows (``CoalescingTransport``).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from agent_supervisor.serve_limits import (
    BoundedHttpToolsProtocol,
    ClientTransport,
    ListenerLimits,
    bounded_protocol,
)

__all__ = ["CLIENT_GONE", "CLIENT_TASK", "CLIENT_TRANSPORT", "CoalescingTransport",
           "GatewayProtocol", "gateway_protocol"]

#: Scope key: the task serving a request, cancelled if its client leaves mid-way.
CLIENT_TASK = "supervisor.client_task"
#: Scope key, set True when that task was cancelled because the client left.
CLIENT_GONE = "supervisor.client_gone"
#: Scope key: the client's transport, which a stream writes its pieces to directly
#: (agent_supervisor/gateway/listener/responses.py ``StreamResponse``).
CLIENT_TRANSPORT = "supervisor.client_transport"


class CoalescingTransport(ClientTransport):
    """A client connection's transport that sends a response's head together with what
    follows it in the same turn of the event loop: uvicorn writes a response's status
    line and headers, then its body, as two writes (two TCP segments with TCP_NODELAY,
    two wake-ups of the client), and a proxied answer is both at once. Measured on this
    2-core box, a loopback ``send()`` under load cost 1.5-2.4 ms of the gateway's time
    each (cProfile: uvicorn's ``send`` and aiohttp's ``_writelines`` were most of the
    added latency), so one fewer per response is the largest cut there is.

    Only a head (a write starting ``HTTP/``) waits for the end of the turn; every other
    write goes out at once unless something is already waiting. A stream's events, each
    written in a later turn than its head, so cost no callback and no extra turn of the
    loop each (one more ``epoll_wait`` per event otherwise). ``close`` sends what is
    pending first (agent_supervisor/serve_limits.py ``ClientTransport``)."""

    __slots__ = ("_loop", "_pending")

    def __init__(self, transport: Any, protocol: BoundedHttpToolsProtocol) -> None:
        super().__init__(transport, protocol)
        self._loop = protocol.loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        """Send ``data``; a response head waits for the end of this turn of the loop."""
        if self._stopped:
            return
        if self._pending:
            self._pending.append(data)
        elif data.startswith(b"HTTP/"):
            self._pending.append(data)
            self._loop.call_soon(self.flush)
        elif not self._transport.is_closing():
            self._transport.write(data)

    def flush(self) -> None:
        """Send what waits for the end of the turn now."""
        pending, self._pending = self._pending, []
        if pending and not self._stopped and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))


class GatewayProtocol(BoundedHttpToolsProtocol):
    """The bounded protocol with the proxy's two additions (module docstring)."""

    transport_class = CoalescingTransport

    def connection_lost(self, exc: Exception | None) -> None:
        cycle = self.cycle
        if not self._turned_away and cycle is not None and not cycle.response_complete:
            task = cast("asyncio.Task[Any] | None", cycle.scope.get(CLIENT_TASK))
            if task is not None and not task.done():
                cycle.scope[CLIENT_GONE] = True         # type: ignore[literal-required]
                task.cancel()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self.scope[CLIENT_TRANSPORT] = self.transport   # type: ignore[literal-required]
        super().on_headers_complete()


def gateway_protocol(limits: ListenerLimits) -> type[BoundedHttpToolsProtocol]:
    """The gateway's protocol class for ``uvicorn.Config(http=...)`` with ``limits``."""
    return bounded_protocol(limits, GatewayProtocol)

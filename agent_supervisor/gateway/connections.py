"""Bounded client connections: uvicorn's httptools protocol with three limits added.

uvicorn 0.54 has none of them on its own (its ``timeout_keep_alive`` is cancelled by any
byte that arrives, and httptools keeps a header that never ends in memory): issue 17
measured 1,100 connections that never finished their headers starving the admin API and
every tick under ``LimitNOFILE=1024``, and a 200 MiB header growing the process from 64 to
458 MiB. So, per connection:

- ``max_connections``: a connection beyond it is answered 503 and closed at once (its fd
  comes back); the limit in force is also kept under half of ``RLIMIT_NOFILE`` so the
  admin API, the engine's sockets and the store keep theirs;
- ``max_header_bytes``: request line and headers beyond it: 431, connection closed;
- ``header_timeout_seconds``: counted from the connection or from a request's first byte
  to the end of its headers, never reset by a trickle of bytes (nginx's
  ``client_header_timeout``): then the connection is closed.

The parser is unchanged (llhttp through httptools, C speed on the hot path).

It also tells a proxied request that its client left: a request's task put in its scope
under ``CLIENT_TASK`` is cancelled when the connection is lost before the response is
complete, with ``CLIENT_GONE`` set in the scope (uvicorn itself only makes ``receive``
answer ``http.disconnect``, and its ``send`` drops what a gone client would have got).
That replaces a task per request listening on ``receive`` (Starlette's
``StreamingResponse`` runs one per stream as well): two task switches and a cancel that
every request paid for.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CLIENT_GONE", "CLIENT_TASK", "CLIENT_TRANSPORT", "BoundedHttpToolsProtocol",
           "CoalescingTransport", "bounded_protocol", "connection_limit"]

logger = logging.getLogger(__name__)

#: Scope key: the task serving a request, cancelled if its client leaves mid-way.
CLIENT_TASK = "supervisor.client_task"
#: Scope key, set True when that task was cancelled because the client left.
CLIENT_GONE = "supervisor.client_gone"
#: Scope key: the client's transport, which a stream writes its pieces to directly
#: (agent_supervisor/gateway/streaming.py ``StreamResponse``).
CLIENT_TRANSPORT = "supervisor.client_transport"


def connection_limit(configured: int) -> int:
    """``configured``, or half the soft ``RLIMIT_NOFILE`` if that is lower."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, soft // 2))


def _reply(transport: Any, status: bytes) -> None:
    """Answer ``status`` and close (``transport``: a client's, or its CoalescingTransport)."""
    if hasattr(transport, "write") and not transport.is_closing():
        transport.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\n"
                        b"connection: close\r\n\r\n")
    transport.close()


class CoalescingTransport:
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
    pending first."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        """Send ``data``; a response head waits for the end of this turn of the loop."""
        if self._pending:
            self._pending.append(data)
        elif data.startswith(b"HTTP/"):
            self._pending.append(data)
            self._loop.call_soon(self._flush)
        elif not self._transport.is_closing():
            self._transport.write(data)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def get_write_buffer_size(self) -> int:
        """Bytes not yet sent (asked once per event of a stream: no ``__getattr__``)."""
        return int(self._transport.get_write_buffer_size())

    def close(self) -> None:
        """Send what is pending, then close."""
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the three limits (class attributes, set by
    ``bounded_protocol`` on a subclass per gateway)."""

    max_connections = 512
    max_header_bytes = 65536
    header_timeout_seconds = 10.0
    refused: ClassVar[dict[str, int]] = {}
    _header_bytes = 0
    _awaiting_headers = True
    _header_timer: asyncio.TimerHandle | None = None
    _turned_away = False

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        if len(self.connections) >= self.max_connections:
            self._count("connections")
            self._turned_away = True
            self.transport = transport
            self._awaiting_headers = False
            _reply(transport, b"503 Service Unavailable")
            return
        super().connection_made(transport)
        self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]
        self._arm()

    def _count(self, why: str) -> None:
        self.refused[why] = self.refused.get(why, 0) + 1

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout_seconds,
                                                  self._header_timeout)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self._awaiting_headers and not self.transport.is_closing():
            self._count("header_timeout")
            _reply(self.transport, b"408 Request Timeout")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._turned_away:
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            task = cycle.scope.get(CLIENT_TASK)
            if task is not None and not task.done():
                cycle.scope[CLIENT_GONE] = True         # type: ignore[typeddict-unknown-key]
                task.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._awaiting_headers:
            super().data_received(data)
            return
        self._header_bytes += len(data)
        super().data_received(data)
        if self._awaiting_headers and self._header_bytes > self.max_header_bytes \
                and not self.transport.is_closing():
            self._count("header_bytes")
            _reply(self.transport, b"431 Request Header Fields Too Large")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._awaiting_headers:      # a new request on a kept-alive connection
            self._awaiting_headers = True
            self._header_bytes = 0
            self._arm()

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._header_bytes = 0
        self._disarm()
        self.scope[CLIENT_TRANSPORT] = self.transport   # type: ignore[typeddict-unknown-key]
        super().on_headers_complete()


def bounded_protocol(*, max_connections: int, max_header_bytes: int,
                     header_timeout_seconds: float) -> type[asyncio.Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` with these limits."""
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {
        "max_connections": max_connections, "max_header_bytes": max_header_bytes,
        "header_timeout_seconds": header_timeout_seconds, "refused": {}})

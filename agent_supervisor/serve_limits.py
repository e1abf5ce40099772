"""Bounded client connections for every listener: uvicorn's httptools protocol with limits.

uvicorn 0.54 has none of these on its own (its ``timeout_keep_alive`` is cancelled by any
byte that arrives, httptools keeps a header that never ends in memory, and nothing bounds
a body's arrival or a client that stops reading). Issue 17 measured 1,100 connections that
never finished their headers starving the admin API and every tick under
``LimitNOFILE=1024`` and a 200 MiB header growing the gateway from 64 to 458 MiB; issue 34
the same header growing the admin API by ~400 MiB and the node agent by ~320 MiB, 520
unauthenticated connections trickling a body after their 401 locking every agent out of
the gateway, ``\\r\\n`` every 3 s holding a kept-alive connection forever, and an agent that
never reads its stream holding its concurrency slot 90 s or more. So, per connection
(``ListenerLimits``; the gateway's from its policy, the admin API's and the node agent's
the defaults):

- ``max_connections``: at the cap the connection that has waited longest without a
  request being served (headers or body still coming, kept alive idle, or closing) is
  closed to make room, so a flood of slow connections churns through itself and an
  agent's request, whose headers arrive at once, is served; only when every connection
  is serving is a new one answered 503 and closed. The cap in force is also kept under
  half of ``RLIMIT_NOFILE`` (``connection_limit``);
- ``max_header_bytes``: request line and headers (and blank lines before them) beyond it:
  431, closed;
- ``header_timeout_seconds``: from the connection or a request's first byte to the end of
  its headers, never reset by a trickle of bytes (nginx's ``client_header_timeout``);
- ``max_body_bytes`` (None: the app bounds it, as the gateway does in the caller's API
  shape) and ``body_timeout_seconds``: from the end of the headers to the end of the body,
  not reset by a trickle either (408, closed);
- ``idle_timeout_seconds``: a kept-alive connection with no new request (blank lines do
  not count) is closed (nginx's ``keepalive_timeout``);
- an answer given before the request's body was read (a 401, a 413) closes the connection
  (``lingering``: the answer is sent with a FIN, what still comes is read and dropped for
  at most ``LINGER_SECONDS``, as nginx's ``lingering_close`` does, so the client reads the
  answer instead of a reset);
- ``write_timeout_seconds``: a client whose unsent bytes have not gone down for this long
  (it stopped reading) is cut (nginx's ``send_timeout``), which ends its request and
  frees whatever it held (a gateway slot).

The parser is unchanged (llhttp through httptools, C speed on the hot path).
``ClientTransport`` wraps each client's transport so that every close uvicorn or an app
asks for goes through these rules.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["LINGER_SECONDS", "BoundedHttpToolsProtocol", "ClientTransport", "ListenerLimits",
           "bounded_protocol", "connection_limit"]

logger = logging.getLogger(__name__)

#: Seconds an early answer's connection keeps reading (and dropping) what its client
#: still sends before it closes (nginx's ``lingering_time`` is 30, ``lingering_timeout``
#: 5; a client that reads the answer closes long before this).
LINGER_SECONDS = 2.0


@dataclass(frozen=True)
class ListenerLimits:
    """One listener's connection bounds. The defaults are the admin API's and the node
    agent's: a dashboard, a Prometheus and a CLI or a head's poller need a few
    connections each, and their bodies are small JSON orders."""

    max_connections: int = 64
    max_header_bytes: int = 65536
    header_timeout_seconds: float = 10.0
    max_body_bytes: int | None = 1024 * 1024
    body_timeout_seconds: float = 30.0
    idle_timeout_seconds: float = 5.0
    write_timeout_seconds: float = 30.0


def connection_limit(configured: int) -> int:
    """``configured``, or half the soft ``RLIMIT_NOFILE`` if that is lower."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, soft // 2))


def _reply(transport: Any, status: bytes) -> None:
    """Answer ``status`` on a raw transport and close it."""
    if not transport.is_closing():
        transport.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\n"
                        b"connection: close\r\n\r\n")
    transport.close()


class Phase(Enum):
    """Where a connection is; each but SERVING has a deadline."""

    HEADERS = "headers"
    BODY = "body"
    SERVING = "serving"
    IDLE = "idle"
    LINGER = "linger"
    CLOSED = "closed"


class ClientTransport:
    """A client connection's transport as uvicorn and the app see it: writes go on
    until the connection is refused or lingering; ``close`` goes through the protocol
    (an answer given before the body was read lingers)."""

    __slots__ = ("_protocol", "_stopped", "_transport")

    def __init__(self, transport: Any, protocol: BoundedHttpToolsProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._stopped = False

    def write(self, data: bytes) -> None:
        """Send ``data`` (dropped once the connection was refused or lingers)."""
        if not self._stopped and not self._transport.is_closing():
            self._transport.write(data)

    def flush(self) -> None:
        """Send what waits (a subclass may hold writes back)."""

    def stop(self) -> None:
        """Send what waits, then drop every later write."""
        self.flush()
        self._stopped = True

    def is_closing(self) -> bool:
        """Whether the connection is closing, refused or lingering."""
        return self._stopped or bool(self._transport.is_closing())

    def get_write_buffer_size(self) -> int:
        """Bytes not yet sent (asked once per event of a stream: no ``__getattr__``)."""
        return int(self._transport.get_write_buffer_size())

    def close(self) -> None:
        """Close, or linger when the request's body is still coming."""
        self._protocol.close_asked()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with ``limits`` (a subclass per listener made by
    ``bounded_protocol`` holds them, its ``refused`` counts and its idle connections)."""

    limits: ClassVar[ListenerLimits] = ListenerLimits()
    refused: ClassVar[dict[str, int]] = {}
    evictable: ClassVar[OrderedDict[BoundedHttpToolsProtocol, None]] = OrderedDict()
    transport_class: ClassVar[type[ClientTransport]] = ClientTransport
    _phase = Phase.HEADERS
    _raw: Any = None
    _timer: asyncio.TimerHandle | None = None
    _write_timer: asyncio.TimerHandle | None = None
    _write_low = 0
    _write_progress_at = 0.0
    _header_bytes = 0
    _body_bytes = 0
    _turned_away = False

    # -- connection ------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self._raw = transport
        if len(self.connections) >= self.limits.max_connections and not self._evict():
            self._count("connections")
            self._turned_away = True
            self.transport = transport
            _reply(transport, b"503 Service Unavailable")
            return
        super().connection_made(transport)
        self.transport = self.transport_class(transport, self)  # type: ignore[assignment]
        self._enter(Phase.HEADERS, self.limits.header_timeout_seconds, self._header_timeout)

    def _evict(self) -> bool:
        """Close the connection waiting longest without being served; False: none."""
        while self.evictable:
            oldest, _ = self.evictable.popitem(last=False)
            if oldest._raw is None or oldest._raw.is_closing():
                continue
            self._count("evicted")
            oldest._refuse(b"408 Request Timeout" if oldest._phase in (
                Phase.HEADERS, Phase.BODY) else None)
            return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._phase = Phase.CLOSED
        self._disarm()
        self._stop_write_timer()
        self.evictable.pop(self, None)
        if self._turned_away:
            return
        super().connection_lost(exc)

    def close_asked(self) -> None:
        """uvicorn or the app closes: linger if the request's body is still coming."""
        if self._phase is Phase.BODY:
            self._linger()
        elif self._phase is not Phase.LINGER:
            self.transport.flush()              # type: ignore[attr-defined]
            self._raw.close()

    # -- phases and their deadlines ----------------------------------------------------

    def _enter(self, phase: Phase, seconds: float | None, then: Any = None) -> None:
        if self._phase is Phase.CLOSED:
            return
        self._phase = phase
        self._disarm()
        if phase is Phase.SERVING:
            self.evictable.pop(self, None)
        else:
            self.evictable[self] = None
            self.evictable.move_to_end(self)
        if seconds is not None:
            self._timer = self.loop.call_later(seconds, then)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _count(self, why: str) -> None:
        n = self.refused[why] = self.refused.get(why, 0) + 1
        if n in (1, 100, 10_000, 1_000_000):
            logger.warning("listener %s: %d connection(s) closed for %s so far",
                           type(self).__name__, n, why.replace("_", " "))

    def _refuse(self, status: bytes | None, *, abort: bool = False,
                linger: bool = False) -> None:
        """Answer ``status`` (None: nothing) and close (``abort``: dropping what was
        not sent; ``linger``: reading and dropping what still comes for a while first,
        so that a client still sending reads the answer); the request in progress, if
        any, sees its client gone."""
        self._disarm()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if cycle.response_started:
                status = None
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.stop()                     # type: ignore[attr-defined]
        if abort:
            self._raw.abort()
            return
        if status is not None and not self._raw.is_closing():
            self._raw.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\n"
                            b"connection: close\r\n\r\n")
        if linger and status is not None:
            self._linger()
        else:
            self._raw.close()

    def _header_timeout(self) -> None:
        self._timer = None
        self._count("header_timeout")
        self._refuse(b"408 Request Timeout")

    def _body_timeout(self) -> None:
        self._timer = None
        self._count("body_timeout")
        self._refuse(b"408 Request Timeout")

    def _idle_timeout(self) -> None:
        self._timer = None
        self._count("idle_timeout")
        self._refuse(None)

    def _linger(self) -> None:
        """The answer is out, the body still coming: send a FIN after it, drop what
        comes, close at the client's EOF or after ``LINGER_SECONDS``."""
        self._count("early_answer")
        self._enter(Phase.LINGER, LINGER_SECONDS, self._linger_end)
        self.transport.stop()                     # type: ignore[attr-defined]
        if self._raw.can_write_eof() and not self._raw.is_closing():
            self._raw.write_eof()
        self.flow.resume_reading()

    def _linger_end(self) -> None:
        self._timer = None
        self._raw.close()

    # -- data ------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        phase = self._phase
        if self._turned_away or phase is Phase.LINGER:
            return
        if phase is Phase.HEADERS or phase is Phase.IDLE:
            self._header_bytes += len(data)
        super().data_received(data)
        if self._raw.is_closing() or self._phase is Phase.LINGER:
            return
        cap = self.limits.max_body_bytes
        if self._phase in (Phase.HEADERS, Phase.IDLE) and \
                self._header_bytes > self.limits.max_header_bytes:
            self._count("header_bytes")
            self._refuse(b"431 Request Header Fields Too Large")
        elif cap is not None and self._body_bytes > cap:
            self._count("body_bytes")
            self._refuse(b"413 Content Too Large", linger=True)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._body_bytes = 0
        if self._phase is not Phase.HEADERS:   # a new request on a kept-alive connection
            self._enter(Phase.HEADERS, self.limits.header_timeout_seconds,
                        self._header_timeout)

    def on_headers_complete(self) -> None:
        self._header_bytes = 0
        self._enter(Phase.BODY, self.limits.body_timeout_seconds, self._body_timeout)
        cap = self.limits.max_body_bytes
        declared = next((v for k, v in self.headers if k == b"content-length"), b"")
        if cap is not None and declared.isdigit() and int(declared) > cap:
            self._count("body_bytes")
            app, self.app = self.app, _too_large      # answered without reading it
            try:
                super().on_headers_complete()
            finally:
                self.app = app
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self._phase is Phase.BODY:
            self._enter(Phase.SERVING, None)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._raw.is_closing() or self._phase is Phase.LINGER:
            return
        current = self.cycle
        if current is not None and not current.response_complete:
            return                                # a pipelined request runs now
        if self._phase is Phase.BODY:             # answered before its body was read
            self._linger()
            return
        self._header_bytes = 0
        self._enter(Phase.IDLE, self.limits.idle_timeout_seconds, self._idle_timeout)

    # -- writing ---------------------------------------------------------------------

    def pause_writing(self) -> None:
        if self._turned_away:
            return
        super().pause_writing()
        if self._write_timer is None:
            self._write_low = self._raw.get_write_buffer_size()
            self._write_progress_at = self.loop.time()
            self._write_timer = self.loop.call_later(self._write_step(), self._write_check)

    def resume_writing(self) -> None:
        if self._turned_away:
            return
        super().resume_writing()
        self._stop_write_timer()

    def _write_step(self) -> float:
        return self.limits.write_timeout_seconds / 4

    def _write_check(self) -> None:
        """The client must have taken some of what waits within the write timeout."""
        self._write_timer = None
        if self._raw.is_closing():
            return
        now, size = self.loop.time(), self._raw.get_write_buffer_size()
        if size < self._write_low:
            self._write_low, self._write_progress_at = size, now
        if now - self._write_progress_at >= self.limits.write_timeout_seconds:
            self._count("write_timeout")
            self._refuse(None, abort=True)
            return
        self._write_timer = self.loop.call_later(self._write_step(), self._write_check)

    def _stop_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None


async def _too_large(scope: Any, receive: Any, send: Any) -> None:
    """413 for a body declared over ``max_body_bytes`` (the body is never read)."""
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": b'{"error": {"message": '
                b'"the request body is too large", "code": 413}, "src": "supervisor"}'})


def bounded_protocol(limits: ListenerLimits,
                     base: type[BoundedHttpToolsProtocol] = BoundedHttpToolsProtocol,
                     ) -> type[BoundedHttpToolsProtocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` with ``limits`` (its
    ``max_connections`` kept under half of ``RLIMIT_NOFILE``), its own counts and its
    own idle connections."""
    bounded = ListenerLimits(**{**limits.__dict__,
                                "max_connections": connection_limit(limits.max_connections)})
    return type(base.__name__, (base,), {"limits": bounded, "refused": {},
                                         "evictable": OrderedDict()})

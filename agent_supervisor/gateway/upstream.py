"""The gateway's client to the engine: HTTP/1.1 on kept-alive connections, parsed in C.

One engine, one host and port, plain HTTP: the proxied traffic needs none of what a
general client carries (redirects, cookies, proxies, TLS, compression, URL building), so
this is a small asyncio protocol around httptools' response parser (llhttp, the parser
uvicorn and Node.js use; already the gateway's server-side parser).

Why not aiohttp, which this replaced (and the justification for hand-written code
outside what the project exists for): measured on this 2-core box against a canned
upstream (the same answer either way, one connection kept alive, process CPU per request
from ``getrusage``), aiohttp 3.14.5 with its C parser took 365-446 us of CPU per request
(its request object, payload registry, header multidicts, timers and a ``writelines``
of 91 us), this client 40-54 us. The gateway's whole budget is 1 ms added per request.

Semantics kept from the aiohttp session it replaced (``Gateway.start`` before):

- ``connect_timeout_seconds`` to open a connection; ``read_timeout_seconds`` between two
  reads once the request is sent (aiohttp's ``sock_read``), then ``TimeoutError``; the
  response's head must be whole within ``read_timeout_seconds`` of the request, however
  its bytes trickle (issue 34);
- any other failure (refused, reset, the engine closing before the end of the response,
  a response that does not parse, a head over ``MAX_HEAD_BYTES``, a status outside
  100-599, a whole body over ``MAX_BODY_BYTES``) is ``UpstreamError``: nothing else
  leaves this client, whatever the engine sends (issue 34: 5 of 74 malformed responses
  raised something else, 3 hung, and a 200 MiB body grew the gateway by 408 MiB);
- a response's ``close()`` before its end closes the connection, which makes vLLM abort
  the request (``with_cancellation``, vllm/entrypoints/utils.py); ``release()`` after
  its end gives the connection back for the next request.

Kept-alive connections idle longer than ``IDLE_SECONDS`` are closed instead of reused:
vLLM closes them after 5 s (``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``, vllm/envs.py) and so does
llama-server (``CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND``, cpp-httplib), and a request
written into a connection the engine is closing at that moment is lost.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

import httptools

from agent_supervisor.gateway.upstream_response import (
    MAX_BODY_BYTES,
    UpstreamError,
    UpstreamResponse,
)

__all__ = ["IDLE_SECONDS", "MAX_BODY_BYTES", "MAX_HEAD_BYTES", "RESEND_WINDOW_SECONDS",
           "Upstream", "UpstreamError", "UpstreamResponse"]

logger = logging.getLogger(__name__)

#: Seconds a kept-alive connection may sit idle and still be reused (the engines close
#: theirs at 5 s: module docstring).
IDLE_SECONDS = 2.0
#: A kept connection lost this soon after a request was written, with no byte of answer,
#: is taken for one the engine closed while idle (the request was not read) and the
#: request is sent once more on a new connection; any later loss, or any answer at all,
#: is an UpstreamError: the engine may have read it, and a generation must not run twice
#: (aiohttp sent again on a kept connection only idempotent methods).
RESEND_WINDOW_SECONDS = 0.1
#: An engine's status line and headers at most (bytes): vLLM sends about 200 (uvicorn's
#: date, server, content-type, content-length or transfer-encoding); the gateway's own
#: cap on a client's head is the same (``gateway.max_header_bytes``' default).
MAX_HEAD_BYTES = 65536


class _NotRead(UpstreamError):
    """A kept connection closed, with not a byte of answer, within
    ``RESEND_WINDOW_SECONDS`` of the request being written: the engine had closed it
    (idle) and never read the request, which may then be sent once more."""


class _Connection(asyncio.Protocol):
    """One kept-alive connection to the engine; one request at a time."""

    def __init__(self, pool: Upstream) -> None:
        self.pool = pool
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.lost = False
        self.idle_since = 0.0
        self.keep_alive = False
        self._head: asyncio.Future[UpstreamResponse] | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._response: UpstreamResponse | None = None
        self._complete = False
        self._paused = False
        self._interim = False
        self._until_close = False
        self._sent_at = 0.0
        self._answered = False
        self._last_read = 0.0
        self._head_bytes = 0
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport has asyncio.Transport's methods without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        self._answered = True
        if self._response is None:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            # An upgrade (101) is not a response the gateway can pass on either; httptools
            # raises it outside HttpParserError (asyncio then logged a fatal error).
            self._fail(UpstreamError(f"the engine's response does not parse: {exc!r}"))
            return
        if self._response is None and self._head_bytes > MAX_HEAD_BYTES:
            self._fail(UpstreamError(f"the engine's response head is longer than "
                                     f"{MAX_HEAD_BYTES} bytes"))

    def eof_received(self) -> bool:
        return False                                 # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.pool.forget(self)
        if self._complete:
            return
        if self._until_close and exc is None and self._response is not None:
            self.on_message_complete()      # the close ends such a body (RFC 9112 6.3 #8)
            return
        why = f": {exc}" if exc is not None else ""
        if not self._answered and self.loop.time() - self._sent_at < RESEND_WINDOW_SECONDS:
            self._fail(_NotRead(f"the engine closed a kept connection as the request was "
                                f"sent{why}"))
        else:
            self._fail(UpstreamError(f"the engine closed the connection before the end of "
                                     f"its response{why}"))

    # -- httptools callbacks -----------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:          # interim (100 Continue, 103 Early Hints): skip it
            self._interim = True
            self._headers = []
            return
        if not 200 <= status < 600:      # no client could be given it (uvicorn has none)
            raise UpstreamError(f"the engine answered status {status}")
        self.keep_alive = self.parser.should_keep_alive()
        # Neither a length nor chunked: the body runs until the engine closes (RFC 9112
        # section 6.3, rule 8; httptools has no finish() to learn of the EOF itself).
        names = {name for name, _ in self._headers}
        self._until_close = status not in (204, 304) and b"content-length" not in names \
            and b"transfer-encoding" not in names
        if self._until_close:
            self.keep_alive = False
        response = UpstreamResponse(self, status, self._headers)
        self._response = response
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_result(response)

    def on_body(self, body: bytes) -> None:
        if self._response is not None:
            self._response._feed(body)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self._complete = True
        self._stop_timer()
        if self._response is not None:
            self._response._finish()

    # -- one request ------------------------------------------------------------------

    def send(self, data: bytes, read_timeout: float) -> asyncio.Future[UpstreamResponse]:
        """Write one whole request; the future resolves at the response's headers."""
        assert self.transport is not None
        self._headers, self._response, self._complete = [], None, False
        self._until_close = self._answered = False
        self._head_bytes = 0
        self._head = self.loop.create_future()
        self._last_read = self._sent_at = self.loop.time()
        self._timer = self.loop.call_at(self._last_read + read_timeout, self._check_read,
                                        read_timeout)
        self.transport.write(data)
        return self._head

    def _check_read(self, read_timeout: float) -> None:
        """aiohttp's ``sock_read``: no byte for ``read_timeout`` seconds is a timeout;
        and the head whole within ``read_timeout`` of the request, trickle or not."""
        due = self._last_read + read_timeout
        if self._response is None:
            due = self._sent_at + read_timeout
        elif self._paused:               # the reader is behind, not the engine
            due = self.loop.time() + read_timeout
        if self.loop.time() < due:
            self._timer = self.loop.call_at(due, self._check_read, read_timeout)
            return
        self._timer = None
        self._fail(TimeoutError(f"the engine sent nothing for {read_timeout:g} s"))

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fail(self, error: BaseException) -> None:
        self._stop_timer()
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_exception(error)
        if self._response is not None:
            self._response._finish(error)
        self.abort()

    def pause(self) -> None:
        if not self._paused and self.transport is not None and not self.lost:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.lost:
            self._paused = False
            self.transport.resume_reading()

    def done_with(self, response: UpstreamResponse, *, reuse: bool) -> None:
        """The proxy is done with ``response``: keep the connection or close it."""
        if response is not self._response:
            return
        self._response = None
        if reuse and self._complete and self.keep_alive and not self.lost \
                and not self._paused:
            self.idle_since = self.loop.time()
            self.pool.keep(self)
        else:
            self.abort()

    def abort(self) -> None:
        """Close at once (a request in flight is abandoned)."""
        self._stop_timer()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.pool.forget(self)


class Upstream:
    """Requests to the engine at ``host:port`` over a pool of kept-alive connections.

    Not bounded in size: the gateway's admission bounds the requests in flight, and
    ``gateway.max_connections`` the clients; idle connections older than
    ``IDLE_SECONDS`` are closed when met.
    """

    def __init__(self, host: str, port: int, *, connect_timeout_seconds: float,
                 read_timeout_seconds: float) -> None:
        self.host, self.port = host, port
        self.connect_timeout_seconds = connect_timeout_seconds
        self.read_timeout_seconds = read_timeout_seconds
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._host_header = f"host: {host}:{port}\r\n".encode("latin-1")

    async def request(self, method: str, target: str, body: bytes,
                      headers: dict[str, str]) -> UpstreamResponse:
        """Send ``method target`` (path and query) with ``body`` and the client's
        ``headers`` (hop-by-hop ones already dropped; ``Host`` and ``Content-Length``
        are set here); returns once the response's headers are in.
        Raises UpstreamError or TimeoutError."""
        data = self._encode(method, target, body, headers)
        conn = self._take()
        if conn is not None:
            try:
                return await self._exchange(conn, method, data)
            except _NotRead:
                # A kept connection the engine closed as the request went out (its
                # keep-alive timeout, or a restart): once more on a new connection,
                # which fails as it should if the engine is gone.
                logger.debug("kept connection to the engine was closed; reconnecting")
        return await self._exchange(await self._connect(), method, data)

    def _encode(self, method: str, target: str, body: bytes, headers: dict[str, str]) -> bytes:
        lines = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), self._host_header]
        for name, value in headers.items():
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
            lines.append(b"content-length: %d\r\n" % len(body))
        lines.append(b"\r\n")
        lines.append(body)
        return b"".join(lines)

    async def _exchange(self, conn: _Connection, method: str, data: bytes) -> UpstreamResponse:
        head = conn.send(data, self.read_timeout_seconds)
        try:
            response = await head
        except BaseException:
            conn.abort()                                  # cancelled: abandon it
            raise
        if method == "HEAD":                             # no body follows
            response._finish()
            conn.keep_alive = False
        return response

    def _take(self) -> _Connection | None:
        now = asyncio.get_running_loop().time()
        while self._idle:
            conn = self._idle.pop()
            if not conn.lost and now - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.abort()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_seconds):
                _, conn = await loop.create_connection(lambda: _Connection(self), self.host,
                                                       self.port)
        except OSError as exc:
            raise UpstreamError(f"cannot connect to the engine at {self.host}:{self.port}: "
                                f"{exc.strerror or exc}") from exc
        self._all.add(conn)
        return conn

    def keep(self, conn: _Connection) -> None:
        self._idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        self._all.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)

    @property
    def open_connections(self) -> int:
        """Connections to the engine now open (in use or idle)."""
        return len(self._all)

    async def close(self) -> None:
        """Close every connection (requests in flight are abandoned)."""
        for conn in list(self._all):
            conn.abort()
        self._idle.clear()

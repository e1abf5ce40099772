"""One response of the engine as the gateway's upstream client reads it
(agent_supervisor/gateway/upstream.py): the status and headers at once, the body as it comes,
pulled (``read``, ``iter_any``) or pushed as it arrives (``pass_to``, a stream's hot
path)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Protocol

__all__ = ["MAX_BODY_BYTES", "Connection", "UpstreamError", "UpstreamResponse"]

logger = logging.getLogger(__name__)

#: Body bytes buffered for a reader that does not keep up before the engine's socket is
#: paused (resumed under half of it): memory stays bounded for a slow client.
_HIGH_WATER = 1 << 20
#: A whole (not streamed) answer of the engine at most (bytes; ``read``): a long
#: completion with logprobs is a few MiB; past this it is refused, not held (issue 34: a
#: 200 MiB body grew the gateway by 408 MiB). A stream is passed on as it comes.
MAX_BODY_BYTES = 64 * 1024 * 1024


class UpstreamError(Exception):
    """The engine could not be reached, or its response broke or did not parse."""


class Connection(Protocol):
    """What a response needs of the connection it came on (the upstream client's
    ``_Connection``, agent_supervisor/gateway/upstream.py): flow control and the end."""

    def pause(self) -> None:
        """Stop reading the engine's socket (the reader is behind)."""

    def resume(self) -> None:
        """Read the engine's socket again."""

    def abort(self) -> None:
        """Close at once (a request in flight is abandoned)."""

    def done_with(self, response: UpstreamResponse, *, reuse: bool) -> None:
        """The reader is done with ``response``: keep the connection (``reuse``) or
        close it."""


class UpstreamResponse:
    """One response of the engine: the status and headers at once, the body as it comes.

    ``headers``: (name, value) pairs as sent, raw bytes, names lower-cased (the shape
    of an ASGI response's headers, so they go on to the client without decoding).
    ``content_type``: the media type, lower case, without parameters
    (``application/octet-stream`` when absent, as RFC 9110 section 8.3 allows).
    """

    __slots__ = (
        "_buffered",
        "_chunks",
        "_conn",
        "_done",
        "_error",
        "_sink",
        "_waiter",
        "content_type",
        "headers",
        "status",
    )

    def __init__(self, conn: Connection, status: int,
                 headers: list[tuple[bytes, bytes]]) -> None:
        self._conn: Connection | None = conn
        self.status = status
        self.headers = headers
        self.content_type = "application/octet-stream"
        for name, value in headers:
            if name == b"content-type":
                self.content_type = value.split(b";", 1)[0].strip().lower().decode("latin-1")
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._done = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._sink: Callable[[bytes], None] | None = None

    # -- fed by the connection ---------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        if self._sink is not None:
            try:
                self._sink(data)
            except Exception as exc:           # ends this response; wait_end raises it
                logger.exception("gateway: passing on the engine's stream failed")
                self._finish(exc)
                if self._conn is not None:
                    self._conn.abort()
            return
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _HIGH_WATER and self._conn is not None:
            self._conn.pause()
        self._wake()

    def _finish(self, error: BaseException | None = None) -> None:
        if self._done:
            return
        self._done = True
        self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- read by the proxy ---------------------------------------------------------------

    async def _more(self) -> bool:
        """Wait until data or the end is there; False at the end of the body."""
        while not self._chunks:
            if self._done:
                if self._error is not None:
                    raise self._error
                return False
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return True

    def _take(self) -> bytes:
        data = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        if self._conn is not None:
            self._conn.resume()
        return data

    def pass_to(self, sink: Callable[[bytes], None]) -> None:
        """From now on give each body piece to ``sink`` as it arrives, inside the read
        callback (no task switch a piece: the stream's hot path); what arrived before
        goes first. ``sink`` must not block; ``wait_end`` waits for the end."""
        if self._chunks:
            sink(self._take())
        self._sink = sink

    async def wait_end(self) -> None:
        """Wait until the body has ended (``pass_to``). Raises UpstreamError or
        TimeoutError if it broke, or what ``sink`` raised."""
        while not self._done:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._error is not None:
            raise self._error

    def pause(self) -> None:
        """Stop reading from the engine (the client is behind); ``resume`` reads again."""
        if self._conn is not None:
            self._conn.pause()

    def resume(self) -> None:
        """Read from the engine again after ``pause``."""
        if self._conn is not None:
            self._conn.resume()

    async def iter_any(self) -> AsyncIterator[bytes]:
        """The body as it arrives: each item is everything received since the last one.
        Raises UpstreamError or TimeoutError if the response breaks."""
        while await self._more():
            yield self._take()

    async def read(self, limit: int = MAX_BODY_BYTES) -> bytes:
        """The whole body. Raises UpstreamError or TimeoutError if it breaks, and
        UpstreamError past ``limit`` bytes (the connection is closed)."""
        parts, size = [], 0
        while await self._more():
            part = self._take()
            size += len(part)
            if size > limit:
                self.close()
                raise UpstreamError(f"the engine's answer is larger than {limit} bytes")
            parts.append(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def release(self) -> None:
        """Done with the response: its connection goes back for reuse if the body was
        read to its end and the engine keeps it alive; otherwise it is closed."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.done_with(self, reuse=self._done and self._error is None)

    def close(self) -> None:
        """Done with the response, whole or not: one not read to its end closes its
        connection (the engine then aborts the request); ``wait_end`` returns."""
        self._sink = None
        self.release()
        if not self._done:
            self._finish(UpstreamError("closed before the end of the engine's response"))

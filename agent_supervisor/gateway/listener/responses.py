"""The gateway's answers as they reach uvicorn: a whole answer as two ASGI messages, and a
stream whose pieces are written straight to the client's transport in HTTP/1.1 chunked
framing (``ChunkWriter``), uvicorn writing only its head and last chunk.

This is the one place that writes the chunked encoding uvicorn would otherwise write, and
it relies on the transport the gateway's protocol (``listener/connections.py``) puts in the
scope; what it takes from uvicorn is checked by tests/unit/test_uvicorn_surface.py. The
stream's pieces themselves come from agent_supervisor/gateway/streaming.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from agent_supervisor.gateway.listener.connections import CLIENT_TRANSPORT

__all__ = ["CLIENT_HIGH_WATER", "ChunkWriter", "StreamResponse", "WholeResponse"]

#: A client's unsent bytes past which the engine's stream is no longer read (bytes).
CLIENT_HIGH_WATER = 256 * 1024


class WholeResponse:
    """A whole answer as two ASGI messages: what Starlette's ``Response`` sends, without
    building and checking its headers again (they come from the engine's answer)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status, self.body = status, body
        self.headers = [*headers, (b"content-length", b"%d" % len(body))]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status,
                    "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


class StreamResponse:
    """A stream: its head as an ASGI message, then every piece written straight to the
    client's transport as a chunk of HTTP/1.1 chunked encoding, from the engine
    connection's read callback (``UpstreamResponse.pass_to``), then the end as an ASGI
    message (uvicorn writes the last chunk and completes its cycle).

    Why not ASGI messages for the pieces (Starlette's ``StreamingResponse`` before):
    each piece then cost a task switch, three async generators and uvicorn's ``send``;
    a stream's events are the gateway's hottest path (one per token per agent).
    Measured against a canned upstream: see agent_supervisor/gateway/upstream.py's figures.
    The client's transport is the one the gateway's connection protocol puts in the
    scope (``CLIENT_TRANSPORT``, agent_supervisor/gateway/listener/connections.py). No task
    listens for the client's disconnect either: that protocol cancels the request's task,
    which ends the stream with CancelledError. ``supervisor_close``: what closes the
    stream if its body never ran."""

    __slots__ = ("headers", "pump", "status", "supervisor_close")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]],
                 pump: Callable[[ChunkWriter], Awaitable[None]],
                 close: Callable[[str | None], Awaitable[None]]) -> None:
        self.status, self.headers, self.pump = status, headers, pump
        self.supervisor_close = close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport = scope.get(CLIENT_TRANSPORT)
        if transport is None:
            raise RuntimeError("a gateway stream needs the gateway's connection protocol "
                               "(agent_supervisor/gateway/listener/connections.py)")
        await send({"type": "http.response.start", "status": self.status,
                    "headers": self.headers})
        await self.pump(ChunkWriter(transport))
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class ChunkWriter:
    """Writes pieces to a client's transport as chunks of HTTP/1.1 chunked encoding
    (RFC 9112 section 7.1: size in hex, CRLF, data, CRLF), as uvicorn's ``send`` does
    for a response without a length."""

    __slots__ = ("transport",)

    def __init__(self, transport: Any) -> None:
        self.transport = transport

    def __call__(self, piece: bytes) -> None:
        if piece and not self.transport.is_closing():
            self.transport.write(b"%x\r\n%b\r\n" % (len(piece), piece))

    def behind(self) -> bool:
        """Whether the client has more than ``CLIENT_HIGH_WATER`` bytes not yet sent."""
        return bool(self.transport.get_write_buffer_size() > CLIENT_HIGH_WATER)

    def caught_up(self) -> bool:
        """Whether the client is down to a quarter of that (or gone)."""
        return self.transport.is_closing() or \
            bool(self.transport.get_write_buffer_size() <= CLIENT_HIGH_WATER // 4)

"""The gateway's own HTTP/1.1 client to the engine (agent_supervisor/gateway/upstream.py) over
real sockets: small asyncio servers on free ports write exact bytes, so each behaviour
(chunked bodies as they come, keep-alive and its limits, timeouts between reads, broken
and interim responses, the request as sent) is deterministic; one stream comes from the
stand-in engine, a real process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import cast

import pytest

from agent_supervisor.gateway import upstream as upstream_module
from agent_supervisor.gateway.upstream import Upstream, UpstreamError
from tests.helpers.gateway_rig import start_engine, stop_engine
from tests.helpers.ports import free_port


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body, as it goes on the wire."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body


class Conn:
    """One connection the server accepted."""

    def __init__(self, server: Server, index: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.server, self.index = server, index
        self.reader, self.writer = reader, writer

    async def request(self) -> tuple[bytes, bytes] | None:
        """The next request's head (without its blank line) and body; None at EOF."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            assert exc.partial == b"", exc.partial
            return None
        head = head[:-4]
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await self.reader.readexactly(length)
        self.server.requests.append((self.index, head, body))
        return head, body

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def eof(self) -> None:
        """Wait until the client closes the connection (nothing else may come)."""
        assert await self.reader.read() == b""


Handler = Callable[[Conn], Awaitable[None]]


async def answer_each(conn: Conn) -> None:
    """Answer every request on the connection, keeping it alive: ``r<n>`` for the nth
    request the server has seen in all."""
    while await conn.request() is not None:
        await conn.send(ok(b"r%d" % len(conn.server.requests)))


class Server:
    """A real TCP server on a free port of 127.0.0.1 that runs ``handler`` for each
    connection; it counts connections and records requests, and fails the test if a
    handler raised."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.port = free_port()
        self.connections: list[Conn] = []
        self.requests: list[tuple[int, bytes, bytes]] = []   # (connection, head, body)
        self.errors: list[BaseException] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn(self, len(self.connections), reader, writer)
        self.connections.append(conn)
        try:
            await self.handler(conn)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - surfaced by __aexit__, not lost in a log
            self.errors.append(exc)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._tasks.discard(task)

    async def __aexit__(self, *exc_info: object) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        assert not self.errors, self.errors


def upstream_for(port: int, *, read_timeout: float = 5.0) -> Upstream:
    return Upstream("127.0.0.1", port, connect_timeout_seconds=2,
                    read_timeout_seconds=read_timeout)


async def test_a_content_length_response_is_read_whole_with_its_head() -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(b"HTTP/1.1 203 Non-Authoritative Information\r\n"
                        b"Content-Type: Application/JSON; charset=utf-8\r\n"
                        b"X-Request-ID: AbC\r\nContent-Length: 11\r\n\r\nhello world")
        await conn.eof()

    async with Server(handler) as server:
        upstream = upstream_for(server.port)
        response = await upstream.request("GET", "/v1/models", b"", {})
        assert response.status == 203
        assert response.content_type == "application/json"
        assert response.headers == [(b"content-type", b"Application/JSON; charset=utf-8"),
                                    (b"x-request-id", b"AbC"), (b"content-length", b"11")]
        assert await response.read() == b"hello world"
        response.release()
        await upstream.close()


async def test_a_chunked_response_written_slowly_is_read_whole() -> None:
    pieces = [b"data: one\n\n", b"data: two\n\n", b"", b"data: [DONE]\n\n"]

    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(CHUNKED_HEAD)
        for piece in pieces:
            if piece:                            # an empty chunk would end the body
                await asyncio.sleep(0.05)
                await conn.send(chunk(piece))
        await asyncio.sleep(0.05)
        await conn.send(LAST_CHUNK)
        await conn.eof()

    async with Server(handler) as server:
        upstream = upstream_for(server.port)
        response = await upstream.request("POST", "/v1/completions", b"{}", {})
        assert response.status == 200
        assert response.content_type == "application/octet-stream"   # none was sent
        assert response.headers == [(b"transfer-encoding", b"chunked")]
        assert await response.read() == b"".join(pieces)
        response.release()
        await upstream.close()


async def test_iter_any_yields_each_piece_before_the_engine_sends_the_next() -> None:
    pieces = [b"data: a\n\n", b"data: bb\n\n", b"data: [DONE]\n\n"]
    taken: asyncio.Queue[bytes] = asyncio.Queue()

    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: Text/Event-Stream ; charset=utf-8"
                        b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in pieces:
            await conn.send(chunk(piece))
            # The next piece goes out only once the client has this one: a client that
            # waited for more (or for the end) would never get it.
            assert await asyncio.wait_for(taken.get(), 5) == piece
        await conn.send(LAST_CHUNK)
        await conn.eof()

    async with Server(handler) as server:
        upstream = upstream_for(server.port)
        response = await upstream.request("POST", "/v1/chat/completions", b"{}", {})
        assert response.content_type == "text/event-stream"
        body = response.iter_any()
        for piece in pieces:
            got = await asyncio.wait_for(anext(body), 2)
            assert got == piece
            taken.put_nowait(got)
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(body), 2)
        response.release()
        await upstream.close()


async def test_a_released_response_gives_its_connection_to_the_next_request() -> None:
    async with Server(answer_each) as server:
        upstream = upstream_for(server.port)
        first = await upstream.request("GET", "/a", b"", {})
        assert await first.read() == b"r1"
        first.release()
        assert upstream.open_connections == 1
        second = await upstream.request("POST", "/b", b"x", {})
        assert await second.read() == b"r2"
        second.release()
        assert len(server.connections) == 1                       # one TCP connection
        assert [(i, head.split(b"\r\n")[0]) for i, head, _ in server.requests] == [
            (0, b"GET /a HTTP/1.1"), (0, b"POST /b HTTP/1.1")]
        assert upstream.open_connections == 1
        await upstream.close()
        assert upstream.open_connections == 0


async def test_closing_a_response_before_its_end_closes_the_connection() -> None:
    saw_eof = asyncio.Event()

    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(CHUNKED_HEAD + chunk(b"data: first\n\n"))
        await conn.eof()        # how vLLM learns the client left: it aborts the request
        saw_eof.set()

    async with Server(handler) as server:
        upstream = upstream_for(server.port)
        response = await upstream.request("POST", "/v1/completions", b"{}", {})
        body = cast(AsyncGenerator[bytes, None], response.iter_any())
        assert await asyncio.wait_for(anext(body), 2) == b"data: first\n\n"
        await body.aclose()                      # the proxy stops reading here
        response.close()
        await asyncio.wait_for(saw_eof.wait(), 2)
        assert upstream.open_connections == 0
        await upstream.close()


async def test_a_connection_idle_past_idle_seconds_is_not_reused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream_module, "IDLE_SECONDS", 0.2)
    async with Server(answer_each) as server:
        upstream = upstream_for(server.port)
        first = await upstream.request("GET", "/a", b"", {})
        assert await first.read() == b"r1"
        first.release()
        await asyncio.sleep(0.3)
        second = await upstream.request("GET", "/b", b"", {})
        assert await second.read() == b"r2"
        second.release()
        assert [i for i, _, _ in server.requests] == [0, 1]        # a second connection
        assert upstream.open_connections == 1                      # the old one was closed
        await upstream.close()


@pytest.mark.parametrize("noticed", [True, False], ids=["close-seen", "close-not-yet-seen"])
async def test_a_kept_connection_the_engine_closed_while_idle_is_replaced(
        noticed: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=upstream_module.__name__)

    async def handler(conn: Conn) -> None:
        # The request written into the shut-down connection resets it on this side.
        with contextlib.suppress(ConnectionResetError):
            await answer_each(conn)

    async with Server(handler) as server:
        upstream = upstream_for(server.port)
        first = await upstream.request("GET", "/a", b"", {})
        assert await first.read() == b"r1"
        first.release()
        assert upstream.open_connections == 1
        # The engine closes the idle connection (its keep-alive timeout): the FIN is sent
        # at once, before the client's loop runs again.
        server.connections[0].writer.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
        if noticed:
            deadline = time.monotonic() + 2
            while upstream.open_connections and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert upstream.open_connections == 0
        # Not noticed: the request is written into the closed connection at once (no
        # await in between), fails there, and goes again on a new one.
        second = await upstream.request("GET", "/b", b"", {})
        assert second.status == 200
        assert await second.read() == b"r2"
        second.release()
        assert [i for i, _, _ in server.requests] == [0, 1]
        retried = any("reconnecting" in r.getMessage() for r in caplog.records)
        assert retried is not noticed
        await upstream.close()


@pytest.mark.parametrize("stall", ["before-head", "mid-body"])
async def test_no_byte_for_the_read_timeout_is_a_timeout(stall: str) -> None:
    saw_eof = asyncio.Event()

    async def handler(conn: Conn) -> None:
        await conn.request()
        if stall == "mid-body":
            await conn.send(CHUNKED_HEAD + chunk(b"data: first\n\n"))
        await conn.eof()                         # then nothing, until the client leaves
        saw_eof.set()

    async with Server(handler) as server:
        upstream = upstream_for(server.port, read_timeout=0.3)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            response = await asyncio.wait_for(
                upstream.request("POST", "/v1/completions", b"{}", {}), 3)
            assert response.status == 200 and stall == "mid-body"
            await asyncio.wait_for(response.read(), 3)
        assert 0.25 <= time.monotonic() - t0 < 2     # the client's timeout, not wait_for's
        await asyncio.wait_for(saw_eof.wait(), 2)                # the connection is closed
        assert upstream.open_connections == 0
        await upstream.close()


async def test_the_read_timeout_is_between_reads_not_in_all() -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(CHUNKED_HEAD)
        for i in range(8):                       # 1.6 s in all, a chunk every 0.2 s
            await asyncio.sleep(0.2)
            await conn.send(chunk(b"%d;" % i))
        await conn.send(LAST_CHUNK)
        await conn.eof()

    async with Server(handler) as server:
        upstream = upstream_for(server.port, read_timeout=0.5)
        t0 = time.monotonic()
        response = await upstream.request("POST", "/v1/completions", b"{}", {})
        assert await response.read() == b"0;1;2;3;4;5;6;7;"
        assert time.monotonic() - t0 >= 1.5                     # longer than the timeout
        response.release()
        await upstream.close()


async def test_nothing_listening_is_an_upstream_error_naming_the_address() -> None:
    port = free_port()
    upstream = upstream_for(port)
    with pytest.raises(UpstreamError, match=f"127.0.0.1:{port}"):
        await upstream.request("GET", "/v1/models", b"", {})
    assert upstream.open_connections == 0
    await upstream.close()


@pytest.mark.parametrize("how", ["read", "iter_any"])
async def test_the_engine_closing_mid_body_is_an_upstream_error(how: str) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        if how == "read":
            await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        else:
            await conn.send(CHUNKED_HEAD + chunk(b"data: first\n\n"))
        await asyncio.sleep(0.1)
        # returning closes the connection before the end of the body

    async with Server(handler) as server:
        upstream = upstream_for(server.port)
        response = await upstream.request("GET", "/x", b"", {})
        assert response.status == 200
        if how == "read":
            with pytest.raises(UpstreamError, match="before the end"):
                await asyncio.wait_for(response.read(), 2)
        else:
            body = response.iter_any()
            assert await asyncio.wait_for(anext(body), 2) == b"data: first\n\n"
            with pytest.raises(UpstreamError, match="before the end"):
                await asyncio.wait_for(anext(body), 2)
        response.close()
        assert upstream.open_connections == 0
        await upstream.close()


@pytest.mark.parametrize("interim", [
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"],
    ids=["100", "103"])
async def test_interim_responses_are_skipped(interim: bytes) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(interim)
        await asyncio.sleep(0.05)                # the interim arrives on its own first
        await conn.send(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
        await answer_each(conn)

    async with Server(handler) as server:
        upstream = upstream_for(server.port)
        response = await upstream.request("POST", "/v1/completions", b"{}", {})
        assert response.status == 201
        assert response.headers == [(b"content-length", b"2")]
        assert await response.read() == b"ok"
        response.release()
        # The connection is still in step: the next response on it is read right.
        again = await upstream.request("GET", "/again", b"", {})
        assert (again.status, await again.read()) == (200, b"r2")
        again.release()
        assert len(server.connections) == 1
        await upstream.close()


async def test_the_request_as_the_engine_receives_it() -> None:
    body = json.dumps({"prompt": "caf\u00e9", "max_tokens": 3}, ensure_ascii=False).encode()
    async with Server(answer_each) as server:
        upstream = upstream_for(server.port)
        for method, target, content, headers in [
                ("POST", "/v1/completions?x=1&y=%20", body,
                 {"Content-Type": "application/json", "authorization": "Bearer k-1",
                  "x-request-id": "abc"}),
                ("GET", "/v1/models", b"", {"accept": "*/*"}),
                ("POST", "/tokenize", b"", {})]:
            response = await upstream.request(method, target, content, headers)
            await response.read()
            response.release()
        host = f"host: 127.0.0.1:{server.port}".encode()
        lines = [(head.split(b"\r\n"), got) for _, head, got in server.requests]
        assert lines == [
            ([b"POST /v1/completions?x=1&y=%20 HTTP/1.1", host,
              b"Content-Type: application/json", b"authorization: Bearer k-1",
              b"x-request-id: abc", b"content-length: %d" % len(body)], body),
            ([b"GET /v1/models HTTP/1.1", host, b"accept: */*"], b""),   # no length
            ([b"POST /tokenize HTTP/1.1", host, b"content-length: 0"], b"")]
        assert len(body) > len("caf\u00e9") + 20            # bytes, not characters
        await upstream.close()


async def test_a_streamed_chat_completion_from_the_stand_in_engine() -> None:
    port = free_port()
    engine = start_engine(port, "--tokens", "4", "--token-delay", "0.05")
    try:
        upstream = upstream_for(port)
        request = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "stream": True}
        response = await upstream.request("POST", "/v1/chat/completions",
                                          json.dumps(request).encode(),
                                          {"content-type": "application/json"})
        assert response.status == 200
        assert response.content_type == "text/event-stream"
        body = response.iter_any()
        pieces = [piece async for piece in body]
        stream = b"".join(pieces)
        assert len(pieces) > 1                    # the words came as they were generated
        assert stream.endswith(b"data: [DONE]\n\n")
        events = [json.loads(line[6:]) for line in stream.decode().split("\n\n")
                  if line.startswith("data: {")]
        words = "".join(c["delta"].get("content", "") for e in events
                        for c in e["choices"])
        assert words == "w0 w1 w2 w3 "
        response.release()
        assert upstream.open_connections == 1            # ended cleanly: kept alive
        await upstream.close()
    finally:
        stop_engine(engine)


async def test_a_response_that_says_connection_close_is_not_reused() -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nr1")
        await conn.eof()

    async with Server(handler) as server:
        upstream = upstream_for(server.port)
        first = await upstream.request("GET", "/a", b"", {})
        assert await first.read() == b"r1"
        first.release()
        assert upstream.open_connections == 0
        await upstream.close()


async def test_a_body_delimited_by_the_close_is_read_whole() -> None:
    """No Content-Length, not chunked: the close ends the body (RFC 9112 section 6.3,
    rule 8). httptools has no finish() to hear of the EOF, so connection_lost ends it."""
    async def handler(conn: Conn) -> None:
        await conn.request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ")
        await asyncio.sleep(0.05)
        await conn.send(b"the close")
        # returning closes the connection: that is the end of this body

    async with Server(handler) as server:
        upstream = upstream_for(server.port)
        try:
            response = await upstream.request("GET", "/x", b"", {})
            assert response.status == 200
            assert await asyncio.wait_for(response.read(), 2) == b"until the close"
            response.release()
            assert upstream.open_connections == 0
        finally:
            await upstream.close()


@pytest.mark.parametrize("failure", ["closed-after-reading", "answer-does-not-parse"])
async def test_a_request_the_engine_read_is_not_sent_twice(failure: str) -> None:
    """Only a kept connection lost with no byte of answer within RESEND_WINDOW_SECONDS
    of the write is taken for one closed while idle (sent again); an engine that read
    the request and then broke, or answered what does not parse, gets it once: a
    generation must not run twice (aiohttp re-sent only idempotent methods)."""
    async def handler(conn: Conn) -> None:
        while await conn.request() is not None:
            if len(conn.server.requests) == 1:
                await conn.send(ok(b"r1"))
            elif failure == "closed-after-reading":
                await asyncio.sleep(0.2)         # working on it; then the connection breaks
                return
            else:
                await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
                await conn.eof()
                return

    async with Server(handler) as server:
        upstream = upstream_for(server.port)
        first = await upstream.request("POST", "/v1/completions", b"one", {})
        assert await first.read() == b"r1"
        first.release()
        try:
            with pytest.raises(UpstreamError):
                await upstream.request("POST", "/v1/completions", b"two", {})
        finally:
            await upstream.close()
        assert [body for _, _, body in server.requests] == [b"one", b"two"]

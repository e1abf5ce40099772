"""Issue 34: every listener's connections are bounded (agent_supervisor/serve_limits.py),
over real sockets against an ``AppServer`` with short limits: a body that trickles, blank
lines on an idle kept-alive connection, an early answer with the body unread, a client
that never reads, a flood at the connection cap, a body over the cap. Each of these held
a connection (and what it stood for: a gateway slot, a file descriptor) for as long as
the client liked before."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator

import pytest

from agent_supervisor.serve import AppServer
from agent_supervisor.serve_limits import LINGER_SECONDS, ListenerLimits
from tests.helpers.flood import close_all, closed, open_many, post_head, trickle
from tests.helpers.ports import free_port

LIMITS = ListenerLimits(max_connections=8, max_header_bytes=8192, header_timeout_seconds=1.0,
                        max_body_bytes=2**20, body_timeout_seconds=1.0,
                        idle_timeout_seconds=1.0, write_timeout_seconds=1.0)
#: What the slow client is allowed beyond a limit before the test calls it a hang.
MARGIN = 1.5
STREAM_BYTES = 200 * 2**20


class App:
    """``/auth`` answers 401 without reading the body (as the gateway does for a missing
    key); ``/echo`` reads the body and says its length; ``/stream`` sends 200 MiB."""

    def __init__(self) -> None:
        self.stream_ended = asyncio.Event()

    async def __call__(self, scope, receive, send) -> None:
        path = scope["path"]
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            chunk = b"x" * 65536
            for _ in range(STREAM_BYTES // len(chunk)):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            self.stream_ended.set()
            return
        size = 0
        if path != "/auth":
            while True:
                message = await receive()
                size += len(message.get("body", b""))
                if not message.get("more_body"):
                    break
        body = json.dumps({"bytes": size}).encode()
        await send({"type": "http.response.start", "status": 401 if path == "/auth" else 200,
                    "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def served() -> AsyncIterator[tuple[App, tuple[str, int], type]]:
    app = App()
    port = free_port()
    server = AppServer(app, "127.0.0.1", port, name="test", limits=LIMITS)
    await server.start()
    try:
        yield app, ("127.0.0.1", port), server.server.config.http
    finally:
        await server.stop()


def _status(s: socket.socket) -> int:
    s.settimeout(5)
    head = s.recv(65536)
    return int(head.split(b" ", 2)[1])


async def test_issue_34_a_body_that_trickles_is_cut_at_the_body_timeout(served) -> None:
    _, address, protocol = served

    def run() -> tuple[int, bool, float]:
        s = socket.create_connection(address)
        s.sendall(post_head("/echo", 1000))
        t0 = time.monotonic()
        while not closed(s, 0.3) and time.monotonic() - t0 < 10:
            trickle([s])                        # a byte every 0.3 s: never a 0.3 s gap
        s.close()
        return 0, True, time.monotonic() - t0

    _, _, took = await asyncio.to_thread(run)
    assert took < LIMITS.body_timeout_seconds + MARGIN
    assert protocol.refused.get("body_timeout") == 1


async def test_issue_34_blank_lines_do_not_keep_an_idle_connection_open(served) -> None:
    _, address, protocol = served

    def run() -> tuple[int, float]:
        s = socket.create_connection(address)
        s.sendall(post_head("/echo", 2) + b"{}")
        status = _status(s)
        t0 = time.monotonic()
        while not closed(s, 0.3) and time.monotonic() - t0 < 10:
            trickle([s], b"\r\n")              # kept alive "forever" before issue 34
        s.close()
        return status, time.monotonic() - t0

    status, took = await asyncio.to_thread(run)
    assert status == 200
    assert took < LIMITS.idle_timeout_seconds + MARGIN
    assert protocol.refused.get("idle_timeout") == 1


async def test_issue_34_an_early_answer_with_the_body_unread_closes_the_connection(
        served) -> None:
    _, address, protocol = served

    def run() -> tuple[int, float]:
        s = socket.create_connection(address)
        s.sendall(post_head("/auth", 10**6) + b"x" * 1000)
        status = _status(s)
        t0 = time.monotonic()
        while not closed(s, 0.2) and time.monotonic() - t0 < 10:
            trickle([s])
        s.close()
        return status, time.monotonic() - t0

    status, took = await asyncio.to_thread(run)
    assert status == 401                         # read before the close, not a reset
    assert took < LINGER_SECONDS + MARGIN
    assert protocol.refused.get("early_answer") == 1


async def test_issue_34_a_client_that_never_reads_is_cut_at_the_write_timeout(
        served) -> None:
    app, address, protocol = served
    socks = await asyncio.to_thread(open_many, address, 1,
                                    b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n", rcvbuf=4096)
    try:
        t0 = time.monotonic()
        # The app's sends return once the client is cut: the stream's work ends.
        await asyncio.wait_for(app.stream_ended.wait(), 20)
        assert protocol.refused.get("write_timeout") == 1
        assert time.monotonic() - t0 < 10
        assert await asyncio.to_thread(closed, socks[0], 2)
    finally:
        close_all(socks)


async def test_issue_34_at_the_connection_cap_slow_connections_make_room(served) -> None:
    _, address, protocol = served

    def run() -> tuple[list[int], int]:
        slow = open_many(address, 3 * LIMITS.max_connections, b"GET / HTTP/1.1\r\nX-Slow: ")
        statuses = []
        for _ in range(3):                        # an agent, while the flood holds on
            s = socket.create_connection(address)
            s.sendall(post_head("/echo", 2) + b"{}")
            statuses.append(_status(s))
            s.close()
        gone = sum(closed(s, 0.2) for s in slow)
        close_all(slow)
        return statuses, gone

    statuses, gone = await asyncio.to_thread(run)
    assert statuses == [200, 200, 200]
    assert gone >= 2 * LIMITS.max_connections    # the oldest made room
    assert protocol.refused.get("evicted", 0) >= 2 * LIMITS.max_connections
    assert protocol.refused.get("connections", 0) == 0


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
async def test_issue_34_a_body_over_the_cap_gets_413(served, chunked: bool) -> None:
    _, address, protocol = served

    def run() -> int:
        s = socket.create_connection(address)
        if chunked:
            s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            piece = b"10000\r\n" + b"x" * 65536 + b"\r\n"
            for _ in range(20):
                try:
                    s.sendall(piece)
                except OSError:
                    break
        else:
            s.sendall(post_head("/echo", 2 * LIMITS.max_body_bytes))
        with s:
            return _status(s)

    assert await asyncio.to_thread(run) == 413
    assert protocol.refused.get("body_bytes") == 1


async def test_issue_34_a_header_over_the_cap_gets_431(served) -> None:
    _, address, _ = served

    def run() -> int:
        s = socket.create_connection(address)
        with s:
            s.sendall(b"GET / HTTP/1.1\r\nX-Long: " + b"a" * (2 * LIMITS.max_header_bytes))
            return _status(s)

    assert await asyncio.to_thread(run) == 431

"""Issue 34: the gateway's HTTP client to the engine (agent_supervisor/gateway/upstream.py)
is total and bounded. A local server answers each request with a random mutation of a
response framed as vLLM's uvicorn frames it (tests/helpers/fuzz.py), in random pieces,
then closes or keeps the connection open. Before this issue 5 of 74 malformed responses
raised something else than the client's UpstreamError, 3 hung, and an engine's header or
body had no size cap. Now: only UpstreamError or TimeoutError, never past the read
timeout, and the caps hold.

``SUPERVISOR_FUZZ_COUNT`` (``make fuzz``) sets the count; CI runs ``DEFAULT_COUNT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator

import psutil
import pytest

from agent_supervisor.gateway.upstream import (
    MAX_BODY_BYTES,
    MAX_HEAD_BYTES,
    Upstream,
    UpstreamError,
)
from tests.helpers.fuzz import CASES, STREAMS, count, http_response, mutate, split
from tests.helpers.ports import free_port

READ_TIMEOUT = 0.1
#: Longer than this for one response is a hang (a response may take a read timeout
#: for its head and one per stalled read after it).
HANG_SECONDS = 5.0
ERROR = json.dumps({"error": {"message": "The model `x` does not exist.", "type":
                              "NotFoundError", "param": "model", "code": 404}}).encode()
RESPONSES = [http_response(c.stream, stream=True) for c in CASES] + [
    http_response((STREAMS / "tokenize_chat.json").read_bytes(), stream=False),
    http_response(ERROR, stream=False, status=404),
    b"HTTP/1.1 100 Continue\r\n\r\n" + http_response(b"{}", stream=False),
]
#: Head mutations the byte mutations rarely reach.
HEADS = [
    lambda r, rng: b"HTTP/1.1 999 Odd\r\n" + r.split(b"\r\n", 1)[1],
    lambda r, rng: b"HTTP/1.1 000 Zero\r\n" + r.split(b"\r\n", 1)[1],
    lambda r, rng: b"HTTP/1.1 100 Continue\r\n\r\n" * rng.randint(1, 50) + r,
    lambda r, rng: r.replace(b"server: uvicorn\r\n",
                             b"x-big: " + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n"),
    lambda r, rng: r.replace(b"content-length: ", b"content-length: 9999"),
    lambda r, rng: r.replace(b"transfer-encoding: chunked\r\n", b""),
    lambda r, rng: r.replace(b"\r\n\r\n", b"\r\nx-bad\x01: \x7f\r\n\r\n", 1),
    lambda r, rng: r.split(b"\r\n\r\n", 1)[0],                       # a head that never ends
    lambda r, rng: b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\n"
                   b"upgrade: websocket\r\n\r\n" + r,
    lambda r, rng: r.replace(b"\r\n\r\n", b"\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n", 1),
]


class Engine:
    """Answers each request with ``self.answer`` in pieces, then closes the connection
    (``close``) or keeps it open, silent."""

    def __init__(self) -> None:
        self.answer: list[bytes] = []
        self.close = True
        self.delay = 0.0
        """Seconds between two pieces (a trickle)."""
        self.writers: set[asyncio.StreamWriter] = set()
        """Connections open now: closed at the fixture's end (``server.close()`` leaves
        them, and a handler still waiting when the loop closes leaks its socket into the
        next test as a ResourceWarning)."""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        with contextlib.suppress(Exception):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                for piece in self.answer:
                    writer.write(piece)
                    await writer.drain()
                    if self.delay:
                        await asyncio.sleep(self.delay)
                if self.close:
                    break
        self.writers.discard(writer)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


@pytest.fixture
async def engine() -> AsyncIterator[tuple[Engine, int]]:
    eng = Engine()
    port = free_port()
    server = await asyncio.start_server(eng.serve, "127.0.0.1", port)
    try:
        yield eng, port
    finally:
        server.close()
        for writer in list(eng.writers):
            writer.close()
        await asyncio.wait_for(server.wait_closed(), 10)
        await asyncio.sleep(0.1)           # the handlers see their connections end


async def _exchange(up: Upstream) -> None:
    resp = await up.request("POST", "/v1/chat/completions", b'{"stream": true}',
                            {"content-type": "application/json"})
    # A status no client could be given (uvicorn has no status line for it) is refused.
    assert 100 <= resp.status < 600, resp.status
    try:
        if resp.content_type == "text/event-stream":
            resp.pass_to(lambda piece: None)
            await resp.wait_end()
        else:
            await resp.read()
    finally:
        resp.close()


async def test_issue_34_malformed_engine_responses_give_upstream_errors_never_raise_or_hang(
        engine: tuple[Engine, int], caplog: pytest.LogCaptureFixture) -> None:
    eng, port = engine
    caplog.set_level(logging.ERROR, logger="asyncio")
    rng = random.Random(34)
    up = Upstream("127.0.0.1", port, connect_timeout_seconds=1,
                  read_timeout_seconds=READ_TIMEOUT)
    errors, hangs, kinds = [], 0, {"ok": 0, "UpstreamError": 0, "TimeoutError": 0}
    n = count()
    for i in range(n):
        answer = RESPONSES[i % len(RESPONSES)]
        answer = rng.choice(HEADS)(answer, rng) if rng.random() < 0.2 else \
            mutate(rng, answer)
        eng.answer, eng.close = split(rng, answer), rng.random() < 0.9
        try:
            await asyncio.wait_for(_exchange(up), HANG_SECONDS)
            kinds["ok"] += 1
        except (UpstreamError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError) and not str(exc).startswith("the engine"):
                hangs += 1                          # wait_for's, not the client's own
            else:
                kinds[type(exc).__name__] = kinds.get(type(exc).__name__, 0) + 1
        except Exception as exc:  # noqa: BLE001 - what the test counts: it must be none
            errors.append((i, repr(exc)))
    await up.close()
    print(f"upstream: {n} inputs, {len(errors)} exceptions, {hangs} hangs, {kinds}")
    assert errors[:5] == []
    assert hangs == 0
    # Nothing escaped into the event loop either (asyncio logs a protocol's exception).
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"][:3] == []


async def test_issue_34_a_head_that_trickles_times_out_at_the_read_timeout(
        engine: tuple[Engine, int]) -> None:
    eng, port = engine
    # A piece every 0.05 s, well within every read timeout, and never the head's end.
    eng.answer = [b"H", b"T", b"T", b"P"] + [b"/1.1 200 OK\r\n"] + [b"x-a: b\r\n"] * 100
    eng.close, eng.delay = False, 0.05
    up = Upstream("127.0.0.1", port, connect_timeout_seconds=1, read_timeout_seconds=0.5)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        await up.request("GET", "/v1/models", b"", {})
    assert time.monotonic() - t0 < 1.5            # before: until the engine stopped
    await up.close()


async def test_issue_34_an_engine_answer_over_the_cap_is_refused_not_held(
        engine: tuple[Engine, int]) -> None:
    eng, port = engine
    size = 200 * 2**20
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    eng.answer = [head % size] + [b"x" * 2**20] * 200
    up = Upstream("127.0.0.1", port, connect_timeout_seconds=1, read_timeout_seconds=5)
    before = psutil.Process().memory_info().rss
    resp = await up.request("GET", "/v1/models", b"", {})
    with pytest.raises(UpstreamError, match="larger than"):
        await resp.read()
    grown = psutil.Process().memory_info().rss - before
    assert grown < 2 * MAX_BODY_BYTES + 32 * 2**20    # before: +408 MiB for this body
    await up.close()

"""Streams from the engine to the client, event by event, and carried across a crash.

A stream is passed on as the engine sends it (``StreamTap``: whole SSE events, nothing
buffered beyond one event). When a resumable stream is cut (the engine's error event,
an ``abort`` finish, a connection that breaks or ends before ``[DONE]``), the client's
connection is held open with SSE comments while the supervisor restarts the engine, and
the continuation planned in supervisor/gateway/resume.py is sent to the new engine; any
other cut ends the stream with an error event in the caller's API shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send

from supervisor.gateway.admission import Slot
from supervisor.gateway.errors import sse_error
from supervisor.gateway.paths import Api
from supervisor.gateway.quality import AnswerWatch
from supervisor.gateway.resume import Resumption, StreamTap
from supervisor.gateway.upstream import UpstreamError, UpstreamResponse

if TYPE_CHECKING:
    from supervisor.gateway.server import Gateway

__all__ = ["DROP", "KEEPALIVE_SECONDS", "NO_SWITCH_GRACE_SECONDS", "StreamResponse",
           "WholeResponse", "response_headers", "send_upstream", "stream_response"]

logger = logging.getLogger(__name__)

#: Hop-by-hop headers (RFC 9110 section 7.6.1) and those the proxy recomputes; ``expect``
#: too: the gateway has read the whole body before it sends anything upstream.
DROP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding",
                  "te", "trailer", "upgrade", "proxy-authorization", "proxy-authenticate",
                  "expect"})
_DROP_RAW = frozenset(h.encode() for h in DROP)
#: While a cut stream waits for the next engine: an SSE comment this often (seconds), so
#: clients and proxies with idle timeouts keep the connection (SSE: lines starting with
#: ":" are comments, ignored by the OpenAI and Anthropic SDKs' decoders).
KEEPALIVE_SECONDS = 5.0
#: A failure with no hold noticed: the supervisor's tick is 1 s and a crash is seen
#: within a tick or two, so wait this long before asking the engine itself whether it
#: serves (the supervisor may be away: its gateway outlives it).
NO_SWITCH_GRACE_SECONDS = 3.0
_KEEPALIVE = b": supervisor: the engine is restarting, this stream will continue\n\n"


async def send_upstream(gw: Gateway, method: str, path: str, query: str, raw: bytes,
                        headers: dict[str, str]) -> UpstreamResponse:
    """One request to the engine; raises UpstreamError or TimeoutError."""
    assert gw.upstream is not None, "Gateway.start() opens the upstream connections"
    target = f"{path}?{query}" if query else path
    t0 = time.monotonic()
    resp = await gw.upstream.request(method, target, raw, headers)
    gw.metrics.upstream_latency.observe(time.monotonic() - t0)
    return resp


def response_headers(resp: UpstreamResponse) -> list[tuple[bytes, bytes]]:
    """The engine's response headers for the client, as ASGI wants them (hop-by-hop
    ones dropped)."""
    return [(k, v) for k, v in resp.headers if k not in _DROP_RAW]


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
    """A stream as ASGI messages, one per piece ``body`` yields (uvicorn sends each as a
    chunk of its chunked encoding). Unlike Starlette's ``StreamingResponse`` it runs no
    task to listen for the client's disconnect: the gateway's connection protocol
    cancels the request's task when its client goes (supervisor/gateway/connections.py),
    which ends ``body`` with CancelledError. ``supervisor_close``: what closes the stream
    if its body never ran."""

    __slots__ = ("body", "headers", "status", "supervisor_close")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]],
                 body: AsyncIterator[bytes], close: Callable[[str | None], Awaitable[None]]
                 ) -> None:
        self.status, self.headers, self.body = status, headers, body
        self.supervisor_close = close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status,
                    "headers": self.headers})
        async for piece in self.body:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Stream:
    """One client's stream: the upstream response now read, the slot, the outcome."""

    def __init__(self, gw: Gateway, api: Api, resp: UpstreamResponse,
                 slot: Slot | None, plan: Resumption | None,
                 headers: dict[str, str], query: str, watch: AnswerWatch | None) -> None:
        self.gw, self.api, self.up, self.slot, self.plan = gw, api, resp, slot, plan
        self.watch = watch
        self.headers, self.query = headers, query
        self.outcome = "ok"
        self.closed = False
        self.tap = StreamTap(record=plan is not None and plan.unsupported is None,
                             dialect=None if plan is None else plan.dialect)
        self.cut: str | None = None

    async def close(self, final: str | None = None) -> None:
        """Close the upstream response and release the slot, once (also when the body
        never started: Starlette cancels it if the client was already gone)."""
        if self.closed:
            return
        self.closed = True
        self.gw.metrics.requests.labels(final or self.outcome).inc()
        self.up.close()
        if self.slot is not None:
            await self.slot.aclose()

    async def _pass_on(self) -> AsyncIterator[bytes]:
        """The current upstream's events; sets ``cut`` when it is cut short."""
        tap, self.cut = self.tap, None
        try:
            async for chunk in self.up.iter_any():
                if self.watch is not None:
                    self.watch.feed_sse(chunk)
                out = tap.feed(chunk)
                if out:
                    yield out
                if tap.engine_error is not None:
                    self.cut = "an error event from the engine"
                    break
            else:
                if not (tap.done or not tap.record):
                    self.cut = "the end of the stream before [DONE]"
        except (UpstreamError, TimeoutError) as exc:
            self.cut = exc.__class__.__name__
        self.up.close()

    def _end(self, why: str) -> bytes:
        self.outcome = "broken_stream"
        return sse_error(self.api, f"the engine's stream broke ({self.cut}); {why}",
                         code="engine_stream_broken")

    async def body(self) -> AsyncIterator[bytes]:
        """Everything the client gets, across as many engines as it takes."""
        gw, plan, resumes = self.gw, self.plan, 0
        try:
            while True:
                async for out in self._pass_on():
                    yield out
                if self.cut is None:
                    if self.watch is not None:
                        self.watch.end_stream()
                    return
                epoch_at_cut = gw.epoch
                how = None if plan is None else plan.refusal(self.tap, resumes,
                                                             gw.spec.max_resumes_per_request)
                if plan is None or how is not None:
                    logger.warning("engine stream broke mid-way (%s): ending it with an "
                                   "error event%s", self.cut, f" ({how})" if how else "")
                    yield self._end(how or "the supervisor is restarting it: retry the "
                                    "request")
                    return
                logger.info("engine stream cut (%s) after %d tokens: holding it open for "
                            "the next engine", self.cut, self.tap.tokens_sent())
                t0 = time.monotonic()
                async for beat in _await_engine(gw, epoch_at_cut):
                    yield beat
                resumes += 1
                nxt = await _resume_upstream(gw, plan, self.tap, self.headers, self.query)
                gw.resumptions.record(plan, self.tap, ok=nxt is not None,
                                      waited=time.monotonic() - t0)
                if nxt is None:                  # build() says why it could not continue
                    yield self._end(plan.unsupported or "the engine did not come back in "
                                    "time: retry the request")
                    return
                self.up = nxt
                self.tap.continue_with(plan)
        except (asyncio.CancelledError, GeneratorExit):
            self.outcome = "client_disconnected"
            raise
        finally:
            await self.close()


def stream_response(gw: Gateway, api: Api, resp: UpstreamResponse, slot: Slot | None,
                    plan: Resumption | None, headers: dict[str, str], query: str,
                    watch: AnswerWatch | None = None) -> StreamResponse:
    """The client's streaming response for the engine's ``resp`` (``plan``: how to
    continue it after a cut, or None; ``watch``: supervisor/gateway/quality.py)."""
    stream = _Stream(gw, api, resp, slot, plan, headers, query, watch)
    return StreamResponse(resp.status, response_headers(resp), stream.body(), stream.close)


async def _await_engine(gw: Gateway, epoch: int) -> AsyncIterator[bytes]:
    """Yield keep-alive comments until the engine serves again: a switch since
    ``epoch`` that has completed, or (no switch noticed, the engine still called ready)
    after a short grace, or the hold timeout."""
    t0 = last = time.monotonic()
    deadline = t0 + gw.spec.hold_timeout_seconds
    while time.monotonic() < deadline:
        now = time.monotonic()
        if gw.ready and gw.epoch != epoch:
            return
        if gw.ready and now - t0 >= NO_SWITCH_GRACE_SECONDS and await gw.engine_healthy():
            return
        if now - last >= KEEPALIVE_SECONDS:
            last = now
            yield _KEEPALIVE
        await asyncio.sleep(0.1)




async def _resume_upstream(gw: Gateway, plan: Resumption, tap: StreamTap,
                           headers: dict[str, str], query: str) -> UpstreamResponse | None:
    """Send the continuation; on failure wait for the engine again (within the hold
    timeout). None: it never answered with a stream."""
    deadline = time.monotonic() + gw.spec.hold_timeout_seconds
    raw = await plan.build(tap, gw.client, gw.base_url)
    if raw is None:
        return None
    for _ in range(_CONTINUATION_TRIES):
        with contextlib.suppress(UpstreamError, TimeoutError):
            resp = await send_upstream(gw, "POST", plan.continuation_path, query, raw,
                                       headers)
            if resp.status == 200 and resp.content_type == "text/event-stream":
                return resp
            logger.warning("continuation of a cut stream answered %d", resp.status)
            resp.close()
        await asyncio.sleep(1.0)
        if time.monotonic() > deadline or not await gw.wait_ready():
            return None
    return None


#: Sends of one continuation at most (an engine that came back and fell again).
_CONTINUATION_TRIES = 3

"""Streams from the engine to the client, event by event, and carried across a crash.

A stream is passed on as the engine sends it (``StreamTap``: whole SSE events, nothing
buffered beyond one event). When a resumable stream is cut (the engine's error event,
an ``abort`` finish, a connection that breaks or ends before ``[DONE]``), the client's
connection is held open with SSE comments while the supervisor restarts the engine, and
the continuation planned in agent_supervisor/gateway/resume/ is sent to the new engine; any
other cut ends the stream with an error event in the caller's API shape. The pieces reach
the client through agent_supervisor/gateway/listener/responses.py (chunked framing).

Whatever the engine sends, the client's stream ends with its API's last event or an error
event in its API's shape (issue 34: 995 of 5,000 malformed engine streams raised inside
the gateway and left the client's stream without one): a stream that does not parse as
SSE events, an event past ``MAX_EVENT_BYTES``, a parser's error on an event of the wrong
shape, or the end of a generation stream before its last event (``end_markers``), are
cuts that are not resumed; the answer watch (agent_supervisor/gateway/quality.py) only
counts, and its failure never touches the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from agent_supervisor.gateway.admission import Slot
from agent_supervisor.gateway.engine_back import engine_back
from agent_supervisor.gateway.errors import sse_error
from agent_supervisor.gateway.listener.responses import ChunkWriter, StreamResponse
from agent_supervisor.gateway.paths import Api
from agent_supervisor.gateway.quality import AnswerWatch
from agent_supervisor.gateway.resume.resumption import Resumption, StreamTap
from agent_supervisor.gateway.resume.sse import end_markers
from agent_supervisor.gateway.upstream import UpstreamError, UpstreamResponse
from agent_supervisor.gateway.visibility import held_comment, resumed_comment

if TYPE_CHECKING:
    from agent_supervisor.gateway.view import GatewayView

__all__ = ["DROP", "KEEPALIVE_SECONDS", "response_headers", "send_upstream",
           "stream_response"]

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
_KEEPALIVE = b": supervisor: the engine is restarting, this stream will continue\n\n"


async def send_upstream(gw: GatewayView, method: str, path: str, query: str, raw: bytes,
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


class _Stream:
    """One client's stream: the upstream response now read, the slot, the outcome."""

    def __init__(self, gw: GatewayView, api: Api, resp: UpstreamResponse,
                 slot: Slot | None, plan: Resumption | None,
                 headers: dict[str, str], query: str, watch: AnswerWatch | None,
                 path: str | None = None) -> None:
        self.gw, self.api, self.up, self.slot, self.plan = gw, api, resp, slot, plan
        self.watch = watch
        self.headers, self.query = headers, query
        self.outcome = "ok"
        self.closed = False
        self.tap = StreamTap(record=plan is not None and plan.unsupported is None,
                             dialect=None if plan is None else plan.dialect,
                             end=end_markers(path or (plan.path if plan else None)))
        self.cut: str | None = None
        self.malformed = False
        """The engine's stream could not be read (not resumed: the engine is not gone)."""
        self.overrun = False
        """Ended by the gateway: clearly past its ``max_tokens`` (gateway/overrun.py)."""

    async def close(self, final: str | None = None) -> None:
        """Close the upstream response and release the slot, once (also when the body
        never started: Starlette cancels it if the client was already gone)."""
        if self.closed:
            return
        self.closed = True
        self._watching("flush")                   # what came before an early end
        self.gw.metrics.requests.labels(final or self.outcome).inc()
        self.up.close()
        if self.slot is not None:
            await self.slot.aclose()

    async def _pass_on(self, write: ChunkWriter) -> None:
        """The current upstream's events, each passed on as it comes (in the engine
        connection's read callback); sets ``cut`` when the stream is cut short."""
        tap, self.cut = self.tap, None
        up = self.up

        def piece(chunk: bytes) -> None:
            if self.cut is not None:
                return
            if watch is not None:
                self._watching("feed_sse", chunk)
            out = tap.feed(chunk)
            if out:
                write(out)
                self._backpressure(write)
            if tap.engine_error is not None:
                self.cut = "an error event from the engine"
                up.close()
            elif self.watch is not None and self.watch.past and self.gw.spec.end_overrun_answers:
                # the read that went past is passed on whole: never less than asked for
                self.cut, self.overrun = "a generation past its max_tokens", True
                up.close()

        watch = self.watch
        up.pass_to(piece)
        try:
            await up.wait_end()
            if self.cut is None and not tap.done and (tap.record or tap.end is not None):
                self.cut = "the end of the stream before its last event"
        except (UpstreamError, TimeoutError) as exc:
            if self.cut is None:
                self.cut = exc.__class__.__name__
        except Exception as exc:  # noqa: BLE001 - a parser's, on what the engine sent
            logger.warning("gateway: the engine's stream does not parse: %s: %s",
                           type(exc).__name__, exc)
            self.cut, self.malformed = f"a malformed stream: {type(exc).__name__}", True
        up.close()

    def _watching(self, method: str, *args: bytes) -> None:
        """The answer watch's ``method``; a watch that fails is dropped (it only counts:
        the stream goes on)."""
        if self.watch is None:
            return
        try:
            getattr(self.watch, method)(*args)
        except Exception:                  # any error of a counter must spare the stream
            logger.exception("gateway: the answer watch failed; this stream is not watched")
            self.watch = None

    def _backpressure(self, write: ChunkWriter) -> None:
        """A client that does not keep up: stop reading the engine until its transport
        has sent most of what waits (polled every 20 ms: uvicorn keeps its flow control
        to itself)."""
        if not write.behind():
            return
        up = self.up
        up.pause()
        loop = asyncio.get_running_loop()

        def check() -> None:
            if self.closed:
                return
            if write.caught_up():
                up.resume()
            else:
                loop.call_later(0.02, check)

        loop.call_later(0.02, check)

    def _end(self, why: str) -> bytes:
        self.outcome = "broken_stream"
        seq = None
        if self.api is Api.RESPONSES:              # the next sequence number, if known
            with contextlib.suppress(Exception):
                last = self.tap.state().extra.get("seq")
                seq = last + 1 if isinstance(last, int) else None
        return sse_error(self.api, f"the engine's stream broke ({self.cut}); {why}",
                         code="engine_stream_broken", sequence_number=seq)

    def _refusal(self, resumes: int) -> str | None:
        """Why the cut stream is not carried to the next engine (None: it is)."""
        plan = self.plan
        if self.overrun:
            return "ended by the gateway: it ran clearly past the request's max_tokens"
        if self.malformed:
            return "the engine sent what the gateway cannot read: retry the request"
        if plan is None:
            return "the supervisor is restarting it: retry the request"
        if self.gw.advising and not self.gw.admission.held:
            return "the engine failed and the supervisor only advises: retry the request"
        if plan.unsupported is None and not self.tap.record:
            return "it is too long to be carried across a restart"
        return plan.refusal(self.tap, resumes, self.gw.spec.max_resumes_per_request)

    async def pump(self, write: ChunkWriter) -> None:
        """Everything the client gets, across as many engines as it takes; whatever
        happens, the stream ends with its last event or an error event."""
        resumes = 0
        try:
            while True:
                await self._pass_on(write)
                if self.cut is None:
                    self._watching("end_stream")
                    return
                epoch_at_cut = self.gw.epoch
                how = self._refusal(resumes)
                if how is not None:
                    logger.warning("engine stream broke mid-way (%s): ending it with an "
                                   "error event (%s)", self.cut, how)
                    write(self._end(how))
                    return
                resumes += 1
                if not await self._resume(write, epoch_at_cut):
                    return
        except asyncio.CancelledError:
            self.outcome = "client_disconnected"
            raise
        except Exception as exc:           # the client still gets an error event
            logger.exception("gateway: a stream could not be passed on")
            self.cut = self.cut or type(exc).__name__
            write(self._end("the gateway could not pass it on: retry the request"))
        finally:
            await self.close()

    async def _resume(self, write: ChunkWriter, epoch_at_cut: int) -> bool:
        """Hold the client while the engine comes back, then continue on it; False (an
        error event written): it could not be continued."""
        gw, plan = self.gw, self.plan
        assert plan is not None
        logger.info("engine stream cut (%s) after %d tokens: holding it open for "
                    "the next engine", self.cut, self.tap.tokens_sent())
        t0 = time.monotonic()
        write(held_comment(gw))
        async for beat in _await_engine(gw, epoch_at_cut):
            write(beat)
        nxt = await _resume_upstream(gw, plan, self.tap, self.headers, self.query)
        gw.resumptions.record(plan, self.tap, ok=nxt is not None,
                              waited=time.monotonic() - t0)
        if nxt is None:                          # build() says why it could not continue
            write(self._end(plan.unsupported or "the engine did not come back in "
                            "time: retry the request"))
            return False
        write(resumed_comment(gw, time.monotonic() - t0))
        self.up = nxt
        self.tap.continue_with(plan)
        return True


def stream_response(gw: GatewayView, api: Api, resp: UpstreamResponse, slot: Slot | None,
                    plan: Resumption | None, headers: dict[str, str], query: str,
                    watch: AnswerWatch | None = None, path: str | None = None,
                    extra: list[tuple[bytes, bytes]] | None = None) -> StreamResponse:
    """The client's streaming response for the engine's ``resp`` to a request on
    ``path`` (``plan``: how to continue it after a cut, or None; ``watch``:
    agent_supervisor/gateway/quality.py; ``extra``: headers added to the engine's,
    agent_supervisor/gateway/visibility.py)."""
    stream = _Stream(gw, api, resp, slot, plan, headers, query, watch, path)
    return StreamResponse(resp.status, [*response_headers(resp), *(extra or ())],
                          stream.pump, stream.close)


async def _await_engine(gw: GatewayView, epoch: int) -> AsyncIterator[bytes]:
    """Yield keep-alive comments until the engine serves again: a switch since
    ``epoch`` that has completed, or (no switch noticed, the engine still called ready)
    after a short grace (``engine_back``), or the hold timeout."""
    t0 = last = time.monotonic()
    deadline = t0 + gw.spec.hold_timeout_seconds
    while time.monotonic() < deadline:
        now = time.monotonic()
        if await engine_back(gw, epoch, now - t0):
            return
        if now - last >= KEEPALIVE_SECONDS:
            last = now
            yield _KEEPALIVE
        await asyncio.sleep(0.1)




async def _resume_upstream(gw: GatewayView, plan: Resumption, tap: StreamTap,
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

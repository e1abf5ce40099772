"""The proxy: every allowed request to the gateway, forwarded to the engine byte for byte.

The engine-facing client is aiohttp's, not httpx's: measured here, one upstream request
costs 0.67 ms of CPU through httpx (pure-Python h11 and anyio) and 0.10 ms through aiohttp
(C parser), and the gateway's budget is 1 ms added per request in all. httpx remains the
client for everything else (probes, /tokenize).

Per request, in order (each refusal in the caller's API shape, supervisor/gateway/errors.py):

1. the raw path against the allow-list (supervisor/gateway/paths.py): not normal 400,
   not forwarded 404, a generation path with another method than POST 405;
2. the agent's key under ``auth: keys`` (``Authorization: Bearer`` or ``x-api-key``,
   as Anthropic's clients send it): 401;
3. the body, read up to ``gateway.max_body_bytes`` (413 beyond, from ``Content-Length``
   before reading anything when it says so); a generation path's JSON checked
   (supervisor/gateway/body.py): 400;
4. the prompt against the mode's ``max_prompt_tokens``: 400; a slot (admission): 429;
5. upstream. Whether the answer is a stream is the engine's word (``Content-Type:
   text/event-stream``), never the request's: a stream is passed on event by event as it
   comes, anything else whole. A failure before any byte reached the client is retried
   once on the engine that comes back (a non-streamed request in flight at a crash is so
   re-sent whole); a chat or text completion stream cut mid-way is resumed there
   (supervisor/gateway/resume.py); any other stream cut ends with an error event.

A client that goes away cancels its request wherever it is: queued (it leaves the queue
and is never sent), waiting for the engine's answer (the upstream connection is closed,
which makes vLLM abort the request: ``with_cancellation`` in vllm/entrypoints/utils.py
listens for the disconnect), or streaming (Starlette stops the body, the upstream
response is closed). It is counted ``client_disconnected``, never as an engine failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import aiohttp
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from supervisor.gateway.admission import Rejected
from supervisor.gateway.body import BadBody, parse_body
from supervisor.gateway.errors import api_error, openai_error, sse_error
from supervisor.gateway.paths import ADMITTED, JSON_BODIES, Api, Route, not_normal
from supervisor.gateway.prompt import estimate_tokens, exact_tokens
from supervisor.gateway.resume import Resumption, StreamTap, plan_resumption

if TYPE_CHECKING:
    from supervisor.gateway.server import Gateway

__all__ = ["ADMITTED_PATHS", "GatewayApp", "openai_error"]

logger = logging.getLogger(__name__)

#: Generation requests: they take a slot and count toward the mode's limits.
ADMITTED_PATHS = ADMITTED
#: Hop-by-hop headers (RFC 9110 section 7.6.1) and those the proxy recomputes.
_DROP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding",
                   "te", "trailer", "upgrade", "proxy-authorization", "proxy-authenticate"})
#: Upstream failures before any byte reached the client: retried once on a new engine.
_RETRYABLE_STATUS = frozenset({500, 502, 503})
#: While a cut stream waits for the next engine: an SSE comment this often (seconds), so
#: clients and proxies with idle timeouts keep the connection (SSE: lines starting with
#: ":" are comments, ignored by the OpenAI and Anthropic SDKs' decoders).
KEEPALIVE_SECONDS = 5.0
_KEEPALIVE = b": supervisor: the engine is restarting, this stream will continue\n\n"


class ClientGone(Exception):
    """The client disconnected before its response started."""


class GatewayApp:
    """The gateway's ASGI app: the proxy on the hot path, FastAPI for its own API.

    Every HTTP request outside ``/gateway/`` goes straight to ``handle`` (FastAPI's
    middleware stack costs about 0.15 ms a request here, a sixth of the 1 ms budget);
    ``/gateway/health`` and ``/gateway/status`` are FastAPI routes. An unexpected error
    in the proxy still answers, in the caller's API shape.
    """

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.api = _gateway_api(gw)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/gateway/"):
            await self.api(scope, receive, send)
            return
        gw = self.gw
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        hit = gw.routes.route(raw_path)
        if hit is None:
            response = _refuse_path(gw, raw_path)
            await response(scope, receive, send)
            return
        route, api = hit
        request = Request(scope, receive)
        try:
            response = await handle(gw, request, route, api)
        except ClientGone:
            gw.metrics.requests.labels("client_disconnected").inc()
            return
        except Exception:
            logger.exception("gateway: %s %s failed", scope["method"], scope["path"])
            response = api_error(api, 500, "the supervisor's gateway failed on this request",
                                 type_="server_error", code="gateway_error")
        try:
            await response(scope, receive, send)
        finally:
            close = getattr(response, "supervisor_close", None)
            if close is not None:                 # a stream whose body never ran
                await close("client_disconnected")


def _refuse_path(gw: Gateway, raw_path: bytes) -> Response:
    api = gw.routes.api_of(raw_path)
    why = not_normal(raw_path)
    gw.metrics.rejections.labels("path").inc()
    if why is not None:
        return api_error(api, 400, f"the request path has {why}: send it in normal form",
                         type_="invalid_request_error", code="path_not_normal")
    return api_error(api, 404, "the supervisor's gateway does not forward this path",
                     type_="invalid_request_error", code="path_not_forwarded")


def _gateway_api(gw: Gateway) -> FastAPI:
    app = FastAPI(title="supervisor gateway", docs_url=None, redoc_url=None,
                  openapi_url=None)

    @app.get("/gateway/health")
    async def health() -> dict[str, Any]:
        """The gateway is up (whatever the engine's state)."""
        return {"status": "ok", "engine_ready": gw.ready}

    @app.get("/gateway/status")
    async def status() -> dict[str, Any]:
        """Mode, limits in force and load."""
        a = gw.admission
        return {"mode": gw.mode_name, "held": a.held, "shed": a.shed,
                "engine_ready": gw.ready, "max_concurrency": a.max_concurrency,
                "max_queue": a.max_queue,
                "max_prompt_tokens": a.limits.max_prompt_tokens,
                "requests_in_flight": a.in_flight, "requests_queued": a.queued,
                "bytes_queued": a.queued_bytes,
                "resumptions": list(gw.resumptions.recent)[-20:]}

    return app


def _agent_key(request: Request) -> str:
    header = request.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    return request.headers.get("x-api-key", "").strip()


def _check_auth(gw: Gateway, request: Request, api: Api) -> Response | None:
    if gw.spec.auth != "keys":
        return None
    token = _agent_key(request)
    digest = hashlib.sha256(token.encode()).hexdigest()
    if token and digest in gw.key_digests:
        return None
    gw.metrics.rejections.labels("unauthorized").inc()
    return api_error(api, 401, "missing or unknown API key for this fleet",
                     type_="invalid_request_error", code="invalid_api_key")


def upstream_headers(gw: Gateway, request: Request) -> dict[str, str]:
    """The client's headers for the engine: hop-by-hop ones dropped; the key the engine
    wants (vLLM's ``--api-key`` reads ``Authorization: Bearer`` only:
    vllm/entrypoints/serve/middleware/authenticate.py), so an ``x-api-key`` becomes one
    in passthrough, and under ``auth: keys`` the agent's key never leaves the gateway."""
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
    if gw.spec.auth == "keys":
        headers.pop("authorization", None)
        headers.pop("x-api-key", None)
        if gw.upstream_key:
            headers["authorization"] = f"Bearer {gw.upstream_key}"
    elif "x-api-key" in headers and "authorization" not in headers:
        headers["authorization"] = f"Bearer {headers['x-api-key']}"
    return headers


async def _read_body(gw: Gateway, request: Request, api: Api) -> bytes | Response:
    """The body, or a 413 once it passes ``max_body_bytes`` (nothing more is read)."""
    cap = gw.spec.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        return _too_large(gw, api, cap)
    chunks: list[bytes] = []
    size = 0
    receive = request.receive
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > cap:
                return _too_large(gw, api, cap)
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(gw: Gateway, api: Api, cap: int) -> Response:
    gw.metrics.rejections.labels("body_too_large").inc()
    return api_error(api, 413, f"the request body is larger than {cap} bytes "
                     "(gateway.max_body_bytes)", type_="invalid_request_error",
                     code="request_too_large", headers={"Connection": "close"})


async def _prompt_check(gw: Gateway, body: dict[str, Any],
                        api: Api) -> tuple[int, Response | None]:
    tokens = estimate_tokens(body)
    limit = gw.admission.limits.max_prompt_tokens
    if limit is None or tokens * 2 < limit:
        return tokens, None
    exact = await exact_tokens(gw.client, gw.base_url, body)
    count = exact if exact is not None else tokens
    if count <= limit:
        return count, None
    gw.metrics.rejections.labels("prompt_too_long").inc()
    how = "" if exact is not None else " (estimated)"
    param = next((f for f in ("messages", "prompt", "input") if f in body), None)
    return count, api_error(
        api, 400, f"this prompt has {count} tokens{how}; the current mode ({gw.mode_name}) "
        f"allows at most {limit} prompt tokens", type_="invalid_request_error",
        code="context_length_exceeded", param=param)


async def _watch_disconnect(receive: Receive, task: asyncio.Task[Any],
                            gone: list[bool]) -> None:
    """Cancel ``task`` when the client disconnects (its body is already read)."""
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            gone.append(True)
            task.cancel()
            return


async def handle(gw: Gateway, request: Request, route: Route, api: Api) -> Response:
    """Authenticate, check, admit, forward; see the module docstring. Raises ClientGone."""
    denied = _check_auth(gw, request, api)
    if denied is not None:
        return denied
    if route is Route.ADMIT and request.method != "POST":
        return api_error(api, 405, f"{request.url.path} takes POST",
                         type_="invalid_request_error", code="method_not_allowed")
    raw = await _read_body(gw, request, api)
    if isinstance(raw, Response):
        return raw
    path = request.url.path
    body: dict[str, Any] = {}
    if route is Route.ADMIT and path in JSON_BODIES:
        try:
            body = parse_body(raw)
        except BadBody as exc:
            gw.metrics.rejections.labels("bad_body").inc()
            return api_error(api, 400, str(exc), type_="invalid_request_error",
                             code="invalid_request_body", param=exc.param)
    # From here on the client may leave at any await: cancel the request then.
    task = asyncio.current_task()
    assert task is not None
    gone: list[bool] = []
    watcher = asyncio.ensure_future(_watch_disconnect(request.receive, task, gone))
    try:
        return await _admitted(gw, request, route, api, path, raw, body)
    except asyncio.CancelledError:
        if gone and task.uncancel() == 0:
            raise ClientGone from None
        raise
    finally:
        watcher.cancel()


async def _admitted(gw: Gateway, request: Request, route: Route, api: Api, path: str,
                    raw: bytes, body: dict[str, Any]) -> Response:
    if route is not Route.ADMIT:
        return await _forward(gw, request, api, path, raw, None)
    tokens, refused = await _prompt_check(gw, body, api)
    if refused is not None:
        return refused
    stack = AsyncExitStack()
    try:
        waited = await stack.enter_async_context(gw.admission.slot(tokens, len(raw)))
    except Rejected as exc:
        gw.metrics.rejections.labels(exc.reason).inc()
        gw.metrics.requests.labels("rejected").inc()
        return api_error(api, 429, str(exc), type_="rate_limit_error", code=exc.reason,
                         headers={"Retry-After": str(exc.retry_after_seconds)})
    gw.metrics.queue_wait.observe(waited)
    plan = plan_resumption(path, body, raw) if gw.spec.resume else None
    try:
        return await _forward(gw, request, api, path, plan.upstream_raw if plan else raw,
                              stack, plan=plan)
    except BaseException:
        await stack.aclose()
        raise


async def send_upstream(gw: Gateway, method: str, path: str, query: str, raw: bytes,
                        headers: dict[str, str]) -> aiohttp.ClientResponse:
    """One request to the engine; raises aiohttp.ClientError or TimeoutError."""
    assert gw.upstream is not None, "Gateway.start() opens the upstream session"
    url = gw.base_url + path + (f"?{query}" if query else "")
    t0 = time.monotonic()
    resp = await gw.upstream.request(method, url, data=raw, headers=headers)
    gw.metrics.upstream_latency.observe(time.monotonic() - t0)
    return resp


async def _forward(gw: Gateway, request: Request, api: Api, path: str, raw: bytes,
                   slot: AsyncExitStack | None, *,
                   plan: Resumption | None = None) -> Response:
    """Send upstream; retry once on a failure before any byte reached the client."""
    epoch = gw.epoch
    headers = upstream_headers(gw, request)
    query = request.url.query
    resp: aiohttp.ClientResponse | None = None
    for attempt in (0, 1):
        try:
            resp = await send_upstream(gw, request.method, path, query, raw, headers)
            if resp.status in _RETRYABLE_STATUS and attempt == 0 and gw.switched(epoch):
                resp.release()
                raise aiohttp.ServerDisconnectedError(f"engine answered {resp.status} "
                                                      "during a switch")
            if resp.content_type == "text/event-stream":
                return _stream(gw, api, resp, slot, plan, headers, query)
            content = await resp.read()
            resp.release()
        except (aiohttp.ClientError, TimeoutError) as exc:
            if resp is not None:
                resp.close()
            if attempt == 0 and await gw.wait_ready():
                gw.metrics.retries.inc()
                logger.info("retrying %s %s once on the engine now ready (%s)",
                            request.method, path, exc.__class__.__name__)
                epoch = gw.epoch
                continue
            gw.metrics.requests.labels("upstream_error").inc()
            if slot is not None:
                await slot.aclose()
            return api_error(api, 503, "the engine is not answering "
                             f"({exc.__class__.__name__})", type_="server_error",
                             code="engine_unavailable", headers={"Retry-After": "5"})
        except BaseException:
            if resp is not None:
                resp.close()                  # cancelled: the engine aborts the request
            raise
        if slot is not None:
            await slot.aclose()
        gw.metrics.requests.labels("ok" if resp.status < 500 else "upstream_error").inc()
        return Response(content, status_code=resp.status, headers=_response_headers(resp))
    raise AssertionError("unreachable: the loop returns")


def _response_headers(resp: aiohttp.ClientResponse) -> dict[str, str]:
    return {k: v for k, v in resp.headers.items() if k.lower() not in _DROP}


def _stream(gw: Gateway, api: Api, resp: aiohttp.ClientResponse, slot: AsyncExitStack | None,
            plan: Resumption | None, headers: dict[str, str], query: str) -> Response:
    outcome = {"value": "ok", "closed": False}
    current = {"resp": resp}

    async def close(final: str | None = None) -> None:
        """Close the upstream response and release the slot, once (also when the body
        never started: Starlette cancels it if the client was already gone)."""
        if outcome["closed"]:
            return
        outcome["closed"] = True
        gw.metrics.requests.labels(final or outcome["value"]).inc()
        current["resp"].close()
        if slot is not None:
            await slot.aclose()

    async def body() -> AsyncIterator[bytes]:
        tap = StreamTap(record=plan is not None and plan.unsupported is None)
        resumes = 0
        try:
            while True:
                up = current["resp"]
                cut: str | None = None
                try:
                    async for chunk in up.content.iter_any():
                        out = tap.feed(chunk)
                        if out:
                            yield out
                        if tap.engine_error is not None:
                            cut = "an error event from the engine"
                            break
                    else:
                        if tap.done or not tap.record:
                            return
                        cut = "the end of the stream before [DONE]"
                except (aiohttp.ClientError, TimeoutError) as exc:
                    cut = exc.__class__.__name__
                up.close()
                epoch_at_cut = gw.epoch
                how = None if plan is None else plan.refusal(tap, resumes,
                                                             gw.spec.max_resumes_per_request)
                if plan is None or how is not None:
                    outcome["value"] = "broken_stream"
                    logger.warning("engine stream broke mid-way (%s): ending it with an "
                                   "error event%s", cut, f" ({how})" if how else "")
                    yield sse_error(api, f"the engine's stream broke ({cut}); "
                                    + (how or "the supervisor is restarting it: retry "
                                       "the request"), code="engine_stream_broken")
                    return
                logger.info("engine stream cut (%s) after %d tokens: holding it open for "
                            "the next engine", cut, tap.tokens_sent())
                t0 = time.monotonic()
                async for beat in _await_engine(gw, epoch_at_cut):
                    yield beat
                resumes += 1
                nxt = await _resume_upstream(gw, plan, tap, headers, query)
                if nxt is None:
                    outcome["value"] = "broken_stream"
                    gw.resumptions.record(plan, tap, ok=False, waited=time.monotonic() - t0)
                    yield sse_error(api, f"the engine's stream broke ({cut}) and the engine "
                                    "did not come back in time: retry the request",
                                    code="engine_stream_broken")
                    return
                gw.resumptions.record(plan, tap, ok=True, waited=time.monotonic() - t0)
                current["resp"] = nxt
                tap.continue_with(plan)
        except (asyncio.CancelledError, GeneratorExit):
            outcome["value"] = "client_disconnected"
            raise
        finally:
            await close()

    response = StreamingResponse(body(), status_code=resp.status,
                                 headers=_response_headers(resp))
    response.supervisor_close = close  # type: ignore[attr-defined]
    return response


async def _await_engine(gw: Gateway, epoch: int) -> AsyncIterator[bytes]:
    """Yield keep-alive comments until the engine serves again: a switch since
    ``epoch`` that has completed, or (no switch noticed, the engine still called ready)
    after a short grace, or the hold timeout."""
    t0 = last = time.monotonic()
    deadline = t0 + gw.spec.hold_timeout_seconds
    while time.monotonic() < deadline:
        now = time.monotonic()
        if gw.ready and (gw.epoch != epoch or now - t0 >= _NO_SWITCH_GRACE_SECONDS):
            return
        if now - last >= KEEPALIVE_SECONDS:
            last = now
            yield _KEEPALIVE
        await asyncio.sleep(0.1)


#: A cut stream with no hold noticed: the supervisor's tick is 1 s and a crash is seen
#: within a tick or two, so wait this long before calling the same engine alive.
_NO_SWITCH_GRACE_SECONDS = 3.0


async def _resume_upstream(gw: Gateway, plan: Resumption, tap: StreamTap,
                           headers: dict[str, str], query: str) -> aiohttp.ClientResponse | None:
    """Send the continuation; on failure wait for the engine again (within the hold
    timeout). None: it never answered with a stream."""
    deadline = time.monotonic() + gw.spec.hold_timeout_seconds
    counted = None
    state = tap.state()
    if not (plan.token_level and state.prompt_ids is not None and state.ids):
        text = state.text
        counted = await exact_tokens(gw.client, gw.base_url, {
            "model": plan.body.get("model"), "prompt": text, "add_special_tokens": False}) \
            if text else 0
    raw = plan.continuation(tap, counted)
    for _ in range(_CONTINUATION_TRIES):
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
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

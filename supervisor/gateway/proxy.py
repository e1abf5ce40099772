"""The proxy: every request to the gateway, forwarded to the engine byte for byte.

The engine-facing client is aiohttp's, not httpx's: measured here, one upstream request
costs 0.67 ms of CPU through httpx (pure-Python h11 and anyio) and 0.10 ms through aiohttp
(C parser), and the gateway's budget is 1 ms added per request in all. httpx remains the
client for everything else (probes, /tokenize).

Chat and text completions, embeddings and responses go through admission control; the
rest (``/v1/models``, ``/tokenize``, ...) is passed straight through. Bodies are never
rewritten, SSE streams are passed on chunk by chunk as the engine sends them, and errors
of the gateway's own use the OpenAI error object with ``"src": "supervisor"``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import aiohttp
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from supervisor.gateway.admission import Rejected
from supervisor.gateway.prompt import estimate_tokens, exact_tokens

if TYPE_CHECKING:
    from supervisor.gateway.server import Gateway

__all__ = ["ADMITTED_PATHS", "GatewayApp", "handle", "openai_error"]

logger = logging.getLogger(__name__)

#: Generation requests: they take a slot and count toward the mode's limits.
ADMITTED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                            "/v1/responses"})
#: Hop-by-hop headers (RFC 9110 section 7.6.1) and those the proxy recomputes.
_DROP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding",
                   "te", "trailer", "upgrade", "proxy-authorization", "proxy-authenticate"})
#: Upstream failures before any byte reached the client: retried once on a new engine.
_RETRYABLE_STATUS = frozenset({500, 502, 503})


def openai_error(status: int, message: str, *, type_: str, code: str,
                 param: str | None = None, headers: dict[str, str] | None = None) -> Response:
    """An error in the OpenAI API's shape, marked as the supervisor's own."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code},
            "src": "supervisor"}
    return JSONResponse(body, status_code=status, headers=headers)


def _sse_error(message: str) -> bytes:
    body = {"error": {"message": message, "type": "server_error", "param": None,
                      "code": "engine_stream_broken"}, "src": "supervisor"}
    return f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n".encode()


class GatewayApp:
    """The gateway's ASGI app: the proxy on the hot path, FastAPI for its own API.

    Every HTTP request outside ``/gateway/`` goes straight to ``handle`` (FastAPI's
    middleware stack costs about 0.15 ms a request here, a sixth of the 1 ms budget);
    ``/gateway/health`` and ``/gateway/status`` are FastAPI routes. An unexpected error
    in the proxy still answers, in the OpenAI error shape.
    """

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.api = _gateway_api(gw)

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http" or scope["path"].startswith("/gateway/"):
            await self.api(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await handle(self.gw, request)
        except Exception:
            logger.exception("gateway: %s %s failed", scope["method"], scope["path"])
            response = openai_error(500, "the supervisor's gateway failed on this request",
                                    type_="server_error", code="gateway_error")
        try:
            await response(scope, receive, send)
        finally:
            close = getattr(response, "supervisor_close", None)
            if close is not None:                 # a stream whose body never ran
                await close("client_disconnected")


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
                "requests_in_flight": a.in_flight, "requests_queued": a.queued}

    return app


def _check_auth(gw: Gateway, request: Request) -> Response | None:
    if gw.spec.auth != "keys":
        return None
    header = request.headers.get("authorization", "")
    token = header[7:] if header.lower().startswith("bearer ") else ""
    digest = hashlib.sha256(token.encode()).hexdigest()
    if token and digest in gw.key_digests:
        return None
    gw.metrics.rejections.labels("unauthorized").inc()
    return openai_error(401, "missing or unknown API key for this fleet",
                        type_="invalid_request_error", code="invalid_api_key")


def _upstream_headers(gw: Gateway, request: Request) -> dict[str, str]:
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
    if gw.spec.auth == "keys":
        headers.pop("authorization", None)
        if gw.upstream_key:
            headers["authorization"] = f"Bearer {gw.upstream_key}"
    return headers


async def _prompt_check(gw: Gateway, body: dict[str, Any]) -> tuple[int, Response | None]:
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
    return count, openai_error(
        400, f"this prompt has {count} tokens{how}; the current mode ({gw.mode_name}) allows "
        f"at most {limit} prompt tokens", type_="invalid_request_error",
        code="context_length_exceeded", param="messages" if "messages" in body else "prompt")


async def handle(gw: Gateway, request: Request) -> Response:
    """Authenticate, check, admit, forward, and release; see the module docstring."""
    denied = _check_auth(gw, request)
    if denied is not None:
        return denied
    path = request.url.path
    raw = await request.body()
    if path not in ADMITTED_PATHS or request.method != "POST":
        return await _forward(gw, request, path, raw, None)
    try:
        body = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    tokens, refused = await _prompt_check(gw, body)
    if refused is not None:
        return refused
    stack = AsyncExitStack()
    try:
        waited = await stack.enter_async_context(gw.admission.slot(tokens))
    except Rejected as exc:
        gw.metrics.rejections.labels(exc.reason).inc()
        gw.metrics.requests.labels("rejected").inc()
        return openai_error(429, str(exc), type_="rate_limit_error", code=exc.reason,
                            headers={"Retry-After": str(exc.retry_after_seconds)})
    gw.metrics.queue_wait.observe(waited)
    try:
        return await _forward(gw, request, path, raw, stack, stream=body.get("stream") is True)
    except BaseException:
        await stack.aclose()
        raise


async def _send(gw: Gateway, request: Request, path: str,
                raw: bytes) -> aiohttp.ClientResponse:
    query = request.url.query
    url = gw.base_url + path + (f"?{query}" if query else "")
    t0 = time.monotonic()
    resp = await gw.upstream.request(request.method, url, data=raw,
                                     headers=_upstream_headers(gw, request))
    gw.metrics.upstream_latency.observe(time.monotonic() - t0)
    return resp


async def _forward(gw: Gateway, request: Request, path: str, raw: bytes,
                   slot: AsyncExitStack | None, *, stream: bool = False) -> Response:
    """Send upstream; retry once on a failure before any byte reached the client."""
    epoch = gw.epoch
    for attempt in (0, 1):
        try:
            resp = await _send(gw, request, path, raw)
            if resp.status in _RETRYABLE_STATUS and attempt == 0 and gw.switched(epoch):
                resp.release()
                raise aiohttp.ServerDisconnectedError(f"engine answered {resp.status} "
                                                      "during a switch")
            if stream:
                return _stream(gw, resp, slot)
            content = await resp.read()
            resp.release()
        except (aiohttp.ClientError, TimeoutError) as exc:
            if attempt == 0 and await gw.wait_ready():
                gw.metrics.retries.inc()
                logger.info("retrying %s %s once on the engine now ready (%s)",
                            request.method, path, exc.__class__.__name__)
                epoch = gw.epoch
                continue
            gw.metrics.requests.labels("upstream_error").inc()
            if slot is not None:
                await slot.aclose()
            return openai_error(503, f"the engine is not answering ({exc.__class__.__name__})",
                                type_="server_error", code="engine_unavailable",
                                headers={"Retry-After": "5"})
        if slot is not None:
            await slot.aclose()
        gw.metrics.requests.labels("ok" if resp.status < 500 else "upstream_error").inc()
        return Response(content, status_code=resp.status, headers=_response_headers(resp))
    raise AssertionError("unreachable: the loop returns")


def _response_headers(resp: aiohttp.ClientResponse) -> dict[str, str]:
    return {k: v for k, v in resp.headers.items() if k.lower() not in _DROP}


def _stream(gw: Gateway, resp: aiohttp.ClientResponse,
            slot: AsyncExitStack | None) -> Response:
    outcome = {"value": "ok", "closed": False}

    async def close(final: str | None = None) -> None:
        """Release the upstream response and the slot, once (also when the body never
        started: Starlette cancels it if the client was already gone)."""
        if outcome["closed"]:
            return
        outcome["closed"] = True
        gw.metrics.requests.labels(final or outcome["value"]).inc()
        resp.release()
        if slot is not None:
            await slot.aclose()

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in resp.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            outcome["value"] = "broken_stream"
            logger.warning("engine stream broke mid-way (%s): ending it with an error event",
                           exc.__class__.__name__)
            yield _sse_error(f"the engine's stream broke ({exc.__class__.__name__}); the "
                             "supervisor is restarting it: retry the request")
        except (asyncio.CancelledError, GeneratorExit):
            outcome["value"] = "client_disconnected"
            raise
        finally:
            await close()

    response = StreamingResponse(body(), status_code=resp.status,
                                 headers=_response_headers(resp))
    response.supervisor_close = close  # type: ignore[attr-defined]
    return response

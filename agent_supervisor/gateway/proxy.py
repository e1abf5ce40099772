"""The proxy: every allowed request to the gateway, forwarded to the engine byte for byte.

The engine-facing client is the gateway's own (agent_supervisor/gateway/upstream.py: kept-alive
HTTP/1.1 parsed by httptools), not httpx's nor aiohttp's: measured here, one upstream
request costs 0.67 ms of CPU through httpx (pure-Python h11 and anyio), 0.37-0.45 ms
through aiohttp 3.14 and 0.04-0.05 ms through it, and the gateway's budget is 1 ms added
per request in all. httpx remains the client for everything else (probes, /tokenize).

Per request, in order (each refusal in the caller's API shape, agent_supervisor/gateway/errors.py):

1. the raw path against the allow-list (agent_supervisor/gateway/paths.py): not normal 400,
   not forwarded 404, a generation path with another method than POST 405;
2. the agent's key under ``auth: keys`` (``Authorization: Bearer`` or ``x-api-key``,
   as Anthropic's clients send it): 401;
3. the body, read up to ``gateway.max_body_bytes`` (413 beyond, from ``Content-Length``
   before reading anything when it says so); a generation path's JSON checked
   (agent_supervisor/gateway/body.py): 400;
4. the prompt against the mode's ``max_prompt_tokens``: 400; a slot (admission): 429;
5. upstream. Whether the answer is a stream is the engine's word (``Content-Type:
   text/event-stream``), never the request's: a stream is passed on event by event as it
   comes, anything else whole. A failure before any byte reached the client is retried
   once on the engine that comes back (a non-streamed request in flight at a crash is so
   re-sent whole); a chat or text completion stream cut mid-way is resumed there
   (agent_supervisor/gateway/resume/resumption.py), and so is an Anthropic messages or
   Responses stream (agent_supervisor/gateway/resume/apis.py); any other stream cut ends
   with an error event.

A client that goes away cancels its request wherever it is: queued (it leaves the queue
and is never sent), waiting for the engine's answer (the upstream connection is closed,
which makes vLLM abort the request: ``with_cancellation`` in vllm/entrypoints/utils.py
listens for the disconnect), or streaming (Starlette stops the body, the upstream
response is closed). It is counted ``client_disconnected``, never as an engine failure.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from agent_supervisor.gateway.admission import Rejected, Slot
from agent_supervisor.gateway.body import BadBody, parse_body
from agent_supervisor.gateway.errors import api_error, openai_error
from agent_supervisor.gateway.failover import FallbackAnswer
from agent_supervisor.gateway.failover_route import admit, wait_back
from agent_supervisor.gateway.key_limits import KEY_NAME, KeyRefused
from agent_supervisor.gateway.listener.connections import CLIENT_GONE, CLIENT_TASK
from agent_supervisor.gateway.listener.responses import StreamResponse, WholeResponse
from agent_supervisor.gateway.models import (
    ALIASED_READS,
    MODELS_PATH,
    aliased,
    aliased_read,
    engine_models,
    policy_models,
)
from agent_supervisor.gateway.overrun import answer_limit
from agent_supervisor.gateway.own_api import gateway_api
from agent_supervisor.gateway.paths import ADMITTED, JSON_BODIES, Api, Route, not_normal
from agent_supervisor.gateway.prompt import estimate_tokens, exact_tokens
from agent_supervisor.gateway.quality import AnswerWatch, agent_label
from agent_supervisor.gateway.readiness import PROBE_PATHS, Readiness
from agent_supervisor.gateway.resume.apis import plan_stream
from agent_supervisor.gateway.resume.resumption import Resumption
from agent_supervisor.gateway.streaming import (
    DROP,
    response_headers,
    send_upstream,
    stream_response,
)
from agent_supervisor.gateway.upstream import UpstreamError, UpstreamResponse
from agent_supervisor.gateway.visibility import answer_headers, mode_headers

if TYPE_CHECKING:
    from agent_supervisor.gateway.view import GatewayView

__all__ = ["ADMITTED_PATHS", "GatewayApp", "openai_error"]

logger = logging.getLogger(__name__)

#: Generation requests: they take a slot and count toward the mode's limits.
ADMITTED_PATHS = ADMITTED
#: Upstream failures before any byte reached the client: retried once on a new engine.
_RETRYABLE_STATUS = frozenset({500, 502, 503})


class ClientGone(Exception):
    """The client disconnected before its response started."""


class GatewayApp:
    """The gateway's ASGI app: the proxy on the hot path, FastAPI for its own API.

    Every HTTP request outside ``/gateway/`` goes straight to ``handle`` (FastAPI's
    middleware stack costs about 0.15 ms a request here, a sixth of the 1 ms budget);
    ``/gateway/health`` and ``/gateway/status`` are FastAPI routes; the load balancers'
    probes (``/livez``, ``/ready``, ``/readyz``: agent_supervisor/gateway/readiness.py)
    are answered here, without a key, never forwarded (one set lookup a request). An
    unexpected error in the proxy still answers, in the caller's API shape.
    """

    def __init__(self, gw: GatewayView) -> None:
        self.gw = gw
        self.api = gateway_api(gw)
        self.readiness = Readiness(gw)
        self.closing = False
        """Draining (``Gateway.drain``): every response says ``Connection: close``."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.closing:
            send = _closing(send)
        if scope["type"] != "http" or scope["path"].startswith("/gateway/"):
            await self.api(scope, receive, send)
            return
        gw = self.gw
        if gw.cors.origins and (allow := gw.cors.allowed(scope)) is not None:
            preflight = gw.cors.preflight(scope, allow)  # agent_supervisor/gateway/cors.py
            if preflight is not None:
                await preflight(scope, receive, send)
                return
            send = gw.cors.wrap(send, allow)
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        if raw_path in PROBE_PATHS:          # the gateway's own, whatever extra_paths say
            answer = await self.readiness.respond(raw_path, scope["method"])
            await answer(scope, receive, send)
            return
        hit = gw.routes.route(raw_path)
        if hit is None:
            await _refuse_path(gw, raw_path)(scope, receive, send)
            return
        route, api = hit
        task = asyncio.current_task()
        assert task is not None
        scope[CLIENT_TASK] = task
        response: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None
        try:
            response = await handle(gw, Request(scope, receive), route, api)
        except ClientGone:
            gw.metrics.requests.labels("client_disconnected").inc()
            return
        except asyncio.CancelledError:
            if not _client_left(scope, task):
                raise
            gw.metrics.requests.labels("client_disconnected").inc()
            return
        except Exception:
            logger.exception("gateway: %s %s failed", scope["method"], scope["path"])
            response = api_error(api, 500, "the supervisor's gateway failed on this request",
                                 type_="server_error", code="gateway_error")
        try:
            await response(scope, receive, send)
        except asyncio.CancelledError:
            if not _client_left(scope, task):   # a stream counts its own outcome
                raise
        finally:
            close = getattr(response, "supervisor_close", None)
            if close is not None:                 # a stream whose body never ran
                await close("client_disconnected")


def _client_left(scope: Scope, task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` was cancelled only because its client left (then that
    cancellation is taken back: the request simply ends)."""
    return bool(scope.get(CLIENT_GONE)) and task.uncancel() == 0


def _closing(send: Send) -> Send:
    """``send`` with ``Connection: close`` added to the response's headers (the client
    then opens its next connection to the gateway's successor)."""
    async def closing_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []),
                                              (b"connection", b"close")]}
        await send(message)
    return closing_send


def _refuse_path(gw: GatewayView, raw_path: bytes) -> Response:
    api = gw.routes.api_of(raw_path)
    why = not_normal(raw_path)
    gw.metrics.rejections.labels("path").inc()
    if why is not None:
        return api_error(api, 400, f"the request path has {why}: send it in normal form",
                         type_="invalid_request_error", code="path_not_normal")
    return api_error(api, 404, "the supervisor's gateway does not forward this path",
                     type_="invalid_request_error", code="path_not_forwarded")


def _agent_key(request: Request) -> str:
    header = request.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    return request.headers.get("x-api-key", "").strip()


def _check_auth(gw: GatewayView, request: Request, api: Api) -> Response | None:
    if gw.spec.auth != "keys":
        return None
    token = _agent_key(request)
    digest = hashlib.sha256(token.encode()).hexdigest()
    if token and digest in gw.key_digests:
        name = gw.key_names[digest]
        request.scope[KEY_NAME] = name
        gw.keys.seen(name)
        return None
    gw.metrics.rejections.labels("unauthorized").inc()
    return api_error(api, 401, "missing or unknown API key for this fleet",
                     type_="invalid_request_error", code="invalid_api_key")


def upstream_headers(gw: GatewayView, request: Request) -> dict[str, str]:
    """The client's headers for the engine: hop-by-hop ones dropped; the key the engine
    wants (vLLM's ``--api-key`` reads ``Authorization: Bearer`` only:
    vllm/entrypoints/serve/middleware/authenticate.py), so an ``x-api-key`` becomes one
    in passthrough, and under ``auth: keys`` the agent's key never leaves the gateway."""
    headers = {k: v for k, v in request.headers.items() if k.lower() not in DROP}
    if gw.spec.auth == "keys":
        headers.pop("authorization", None)
        headers.pop("x-api-key", None)
        if gw.upstream_key:
            headers["authorization"] = f"Bearer {gw.upstream_key}"
    elif "x-api-key" in headers and "authorization" not in headers:
        headers["authorization"] = f"Bearer {headers['x-api-key']}"
    return headers


async def _read_body(gw: GatewayView, request: Request, api: Api) -> bytes | Response:
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


def _too_large(gw: GatewayView, api: Api, cap: int) -> Response:
    gw.metrics.rejections.labels("body_too_large").inc()
    return api_error(api, 413, f"the request body is larger than {cap} bytes "
                     "(gateway.max_body_bytes)", type_="invalid_request_error",
                     code="request_too_large", headers={"Connection": "close"})


async def _prompt_check(gw: GatewayView, body: dict[str, Any],
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


async def handle(gw: GatewayView, request: Request, route: Route, api: Api,
                 ) -> WholeResponse | StreamResponse | Response | FallbackAnswer:
    """Authenticate, check, admit, forward; see the module docstring. Raises ClientGone."""
    denied = _check_auth(gw, request, api)
    if denied is not None:
        return denied
    if not gw.ready and request.scope["path"] == MODELS_PATH and request.method == "GET":
        own = policy_models(gw)          # agent_supervisor/gateway/models.py (issue 33)
        if own is not None:
            return own
    if route is Route.ADMIT and request.method != "POST":
        return api_error(api, 405, f"{request.scope['path']} takes POST",
                         type_="invalid_request_error", code="method_not_allowed")
    raw = await _read_body(gw, request, api)
    if isinstance(raw, Response):
        return raw
    path: str = request.scope["path"]      # not request.url: it builds the whole URL
    body: dict[str, Any] = {}
    if route is Route.ADMIT and path in JSON_BODIES:
        try:
            body = parse_body(raw)
        except BadBody as exc:
            gw.metrics.rejections.labels("bad_body").inc()
            return api_error(api, 400, str(exc), type_="invalid_request_error",
                             code="invalid_request_body", param=exc.param)
        raw = aliased(gw, body, raw)           # gateway.model_aliases (issue 33)
    elif path in ALIASED_READS:
        raw = aliased_read(gw, raw)            # the token counters too (issue 33)
    # From here on a client that leaves cancels this task (agent_supervisor/gateway/
    # listener/connections.py): queued, it leaves the queue; upstream, the engine's connection
    # is closed and the engine aborts the request.
    return await _admitted(gw, request, route, api, path, raw, body)


async def _admitted(gw: GatewayView, request: Request, route: Route, api: Api, path: str,
                    raw: bytes, body: dict[str, Any],
                    ) -> WholeResponse | StreamResponse | Response | FallbackAnswer:
    if route is not Route.ADMIT:
        return await _forward(gw, request, api, path, raw, None)
    tokens, refused = await _prompt_check(gw, body, api)
    if refused is not None:
        return refused
    name = request.scope.get(KEY_NAME)
    try:
        key_back = gw.keys.take(name) if name else None    # gateway/key_limits.py
        try:
            waited = await admit(gw, request, path, raw, body, tokens, key_back)
        except BaseException:
            if key_back is not None:
                key_back()
            raise
    except (Rejected, KeyRefused) as exc:
        gw.metrics.rejections.labels(exc.reason).inc()
        gw.metrics.requests.labels("rejected").inc()
        status = exc.status if isinstance(exc, Rejected) else 429
        return api_error(api, status, str(exc), type_="rate_limit_error" if
                         status == 429 else "server_error", code=exc.reason,
                         headers={"Retry-After": str(exc.retry_after_seconds),
                                  **mode_headers(gw)})
    if isinstance(waited, FallbackAnswer):       # the failover (gateway/failover.py)
        return waited
    slot = Slot(gw.admission, tokens, key_back)
    gw.metrics.queue_wait.observe(waited)
    try:
        plan = plan_stream(path, body, raw) if gw.spec.resume else None
        watch = gw.quality.watch(agent_label(_agent_key(request), gw.key_names),
                                 gw.quality.request(body), answer_limit(
                                     body, margin_tokens=gw.spec.overrun_margin_tokens,
                                     margin_ratio=gw.spec.overrun_margin_ratio)) \
            if body else None
        return await _forward(gw, request, api, path, plan.upstream_raw if plan else raw,
                              slot, plan=plan, watch=watch, held_s=waited,
                              original=(raw, body))
    except BaseException:
        await slot.aclose()
        raise


async def _forward(gw: GatewayView, request: Request, api: Api, path: str, raw: bytes,
                   slot: Slot | None, *, plan: Resumption | None = None,
                   watch: AnswerWatch | None = None, held_s: float = 0.0,
                   original: tuple[bytes, dict[str, Any]] | None = None,
                   ) -> WholeResponse | StreamResponse | Response | FallbackAnswer:
    """Send upstream; retry once on a failure before any byte reached the client.
    ``held_s``: seconds the request waited for its slot (the answer's headers say it,
    agent_supervisor/gateway/visibility.py, with the wait before a re-send added)."""
    epoch = gw.epoch
    headers = upstream_headers(gw, request)
    query = request.scope["query_string"].decode()     # as Starlette's URL does
    resp: UpstreamResponse | None = None
    for attempt in (0, 1):
        t_cut: float | None = None           # when the engine failed this request
        try:
            resp = await send_upstream(gw, request.method, path, query, raw, headers)
            if resp.content_type == "text/event-stream" and resp.status < 500:
                return stream_response(gw, api, resp, slot, plan, headers, query, watch,
                                       path, answer_headers(gw, held_seconds=held_s,
                                                            resumed=attempt == 1))
            content = await resp.read()
            resp.release()
            t_cut = time.monotonic()
            if resp.status in _RETRYABLE_STATUS and attempt == 0 and slot is not None \
                    and await _crashed(gw, epoch, wait=not gw.failover.covers(path)):
                raise UpstreamError(f"engine answered {resp.status} "
                                                      "and was switched")
        except (UpstreamError, TimeoutError) as exc:
            if resp is not None:
                resp.close()
            t_cut = time.monotonic() if t_cut is None else t_cut
            back = attempt == 0 and await wait_back(gw, request, path, epoch, slot, original,
                                                    held_s + time.monotonic() - t_cut)
            if isinstance(back, FallbackAnswer):      # the failover (gateway/failover.py)
                return back
            if back:
                gw.metrics.retries.inc()
                held_s += time.monotonic() - t_cut
                gw.resumptions.resent(path, waited=time.monotonic() - t_cut)
                logger.info("retrying %s %s once on the engine now ready (%s)",
                            request.method, path, exc.__class__.__name__)
                epoch = gw.epoch
                continue
            gw.metrics.requests.labels("upstream_error").inc()
            if slot is not None:
                await slot.aclose()
            return api_error(api, 503, "the engine is not answering "
                             f"({exc.__class__.__name__})", type_="server_error",
                             code="engine_unavailable",
                             headers={"Retry-After": "5", **mode_headers(gw)})
        except BaseException:
            if resp is not None:
                resp.close()                  # cancelled: the engine aborts the request
            raise
        if slot is not None:
            await slot.aclose()
        if watch is not None:
            watch.whole(resp.status, content, switched=gw.switched(epoch))
        gw.metrics.requests.labels("ok" if resp.status < 500 else "upstream_error").inc()
        if path == "/v1/models" and resp.status == 200:
            content = engine_models(gw, content)
        return WholeResponse(resp.status, [*response_headers(resp), *answer_headers(
            gw, held_seconds=held_s, resumed=attempt == 1)], content)
    raise AssertionError("unreachable: the loop returns")


async def _crashed(gw: GatewayView, epoch: int, *, wait: bool = True) -> bool:
    """After a 5xx answer to an admitted request: whether it came from an engine going
    down, which then came back (the request is sent again) or not.

    vLLM answers 500 to the requests it holds when its EngineCore dies, before the
    supervisor has seen the crash; its /health then answers 503 (``EngineDeadError``,
    vllm PR #24897) and nothing once the API server has exited (0.6-0.7 s later on the
    CPU engine, shared/CPU_ENGINE.md). So /health is asked every ``HEALTH_POLL_SECONDS``:
    a hold (the supervisor's switch) or /health failing means a crash, and the request
    waits for the next engine; /health answering 200 for ``HEALTHY_500_SECONDS`` means
    the engine's own 500, passed on (it waited the whole ``NO_SWITCH_GRACE_SECONDS``
    before). ``wait`` False (a path a fallback takes, gateway/failover.py): True once a
    crash is seen, without waiting for the engine (the caller's wait races the failover).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HEALTHY_500_SECONDS
    while not gw.switched(epoch):
        if not await gw.engine_healthy():
            return await gw.wait_engine(epoch) if wait else True
        if gw.switched(epoch):
            break
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(HEALTH_POLL_SECONDS)
    return await gw.wait_engine(epoch) if wait else True     # a switch: wait for its end


#: /health answering 200 this long after a 5xx: the engine's own error (seconds).
HEALTHY_500_SECONDS = 1.5
#: How often /health is asked meanwhile (seconds).
HEALTH_POLL_SECONDS = 0.25

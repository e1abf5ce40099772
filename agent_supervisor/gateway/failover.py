"""Failover while held (issue 31 item 5): generation requests go to a declared fallback
upstream while the local engine is held past a bound.

The policy's ``gateway.fallbacks`` (agent_supervisor/policy/gateway.py ``Fallback``) are
other OpenAI- or Anthropic-compatible endpoints (another box running this supervisor, a
hosted API), each with its own key. The local engine is *held* from the gateway's hold
(``Gateway.hold``: the engine starting, restarting, switched, a reboot required) until
its release; ``gateway.failover_after_seconds`` after the hold began the failover is
*engaged*, and until the release:

- a generation request of an API a fallback speaks (``chat``, ``completions``,
  ``responses``, ``messages``) that is still waiting at the gateway (for a slot, or for
  the engine before a re-send) goes to the first fallback that answers; one arriving
  meanwhile goes there at once. So none waits longer than the bound for the failover.
- a fallback that cannot be reached or answers 5xx is passed over for the next; when
  none answers, the request goes on waiting for the local engine (it keeps its place
  in the queue and its ``hold_timeout_seconds``) and tries the fallbacks again every
  ``RETRY_SECONDS``.
- a stream already coming from the local engine is never sent elsewhere: a cut one is
  resumed on the local engine as before (agent_supervisor/gateway/streaming.py).

The fallback gets the request's body (``model`` replaced by the fallback's ``model``
when set) and the client's headers without its key: ``Authorization: Bearer KEY`` of
the fallback's own key, or ``x-api-key: KEY`` for ``messages`` (Anthropic's header).
Its answer is passed on byte for byte with the supervisor's headers
(agent_supervisor/gateway/visibility.py) and ``X-Supervisor-Served-By: NAME``.

On record: ``supervisor_gateway_failover_requests_total{fallback}`` (answers served by
it), ``supervisor_gateway_failover_failures_total{fallback}`` (tries it failed), and a
``FailoverLog`` entry when a hold's first request fails over (``started``, with the
hold's reason) and at the release (``ended``, with the counts); the supervisor records
each as an incident of kind ``failover`` (agent_supervisor/runtime/gateway_link.py).
Keys are never logged: errors name the fallback and the environment variable or file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client import CollectorRegistry, Counter
from starlette.types import Receive, Scope, Send

from agent_supervisor.gateway.visibility import SERVED_BY

if TYPE_CHECKING:
    from agent_supervisor.policy import Policy
    from agent_supervisor.policy.gateway import Fallback

__all__ = ["API_OF_PATH", "RETRY_SECONDS", "Failover", "FailoverLog", "FallbackAnswer"]

logger = logging.getLogger(__name__)

#: The generation paths a fallback may take, by the ``apis`` name that covers each.
API_OF_PATH = {"/v1/chat/completions": "chat", "/v1/completions": "completions",
               "/v1/responses": "responses", "/v1/messages": "messages"}
#: A request that no fallback answered tries them again this often while it waits
#: for the local engine (seconds).
RETRY_SECONDS = 5.0
#: Seconds to connect to a fallback (a box across a network, a hosted API).
CONNECT_SECONDS = 5.0
#: Hop-by-hop headers (as agent_supervisor/gateway/streaming.py's ``DROP``, not imported:
#: streaming.py sits above this module).
_HOP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding",
                  "te", "trailer", "upgrade", "proxy-authorization", "proxy-authenticate",
                  "expect"})
_DROP_OUT = _HOP | {"authorization", "x-api-key", "accept-encoding"}
#: Not passed back: hop-by-hop, and the two uvicorn writes itself.
_DROP_BACK = frozenset(h.encode() for h in _HOP | {"date", "server"})


class _Upstream:
    """One fallback as the gateway uses it: its spec and its key (read once)."""

    def __init__(self, spec: Fallback, policy: Policy) -> None:
        self.spec = spec
        self.name = spec.name
        self.key = _read_key(spec, policy)
        self.apis = frozenset(spec.apis)


def _read_key(spec: Fallback, policy: Policy) -> str | None:
    """The fallback's key from its environment variable or file (None, logged without
    the key, when it is missing: the fallback is then sent no key)."""
    if spec.api_key_env is not None:
        key = os.environ.get(spec.api_key_env)
        if not key:
            logger.error("gateway.fallbacks %s: environment variable %s is not set",
                         spec.name, spec.api_key_env)
        return key or None
    assert spec.api_key_file is not None
    path = policy.resolve(spec.api_key_file)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        logger.error("gateway.fallbacks %s: api_key_file %s: %s", spec.name, path,
                     exc.strerror or type(exc).__name__)
        return None
    return lines[0].strip() if lines and lines[0].strip() else None


class FailoverLog:
    """The failovers' starts and ends: the last 100 in memory, numbered (``seq``) for
    the supervisor, which asks for those above the last it saw."""

    def __init__(self) -> None:
        self.recent: deque[dict[str, Any]] = deque(maxlen=100)
        self.seq = 0
        self.on_entry: Callable[[dict[str, Any]], None] | None = None
        """Called with each new entry (the supervisor's own in-process gateway records
        it at once; a gateway process's are read over its control link)."""

    def add(self, **entry: Any) -> dict[str, Any]:
        """One entry: ``event`` (``started``/``ended``), ``reason``, counts ..."""
        self.seq += 1
        out = {"seq": self.seq, "at": time.time(), **entry}
        self.recent.append(out)
        if self.on_entry is not None:
            self.on_entry(out)
        return out


class FallbackAnswer:
    """A fallback's answer passed on as it comes (whole or a stream), as ASGI messages.
    ``supervisor_close``: closes it if its body never ran (agent_supervisor/gateway/
    proxy.py calls it after every answer)."""

    def __init__(self, resp: httpx.Response, headers: list[tuple[bytes, bytes]],
                 done: Callable[[], None] | None) -> None:
        self.resp, self.headers, self._done = resp, headers, done
        self.status = resp.status_code

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status,
                        "headers": self.headers})
            async for chunk in self.resp.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.supervisor_close(None)

    async def supervisor_close(self, _why: str | None) -> None:
        """Close the fallback's response and give back what the request held (once)."""
        await self.resp.aclose()
        done, self._done = self._done, None
        if done is not None:
            done()


class Failover:
    """The fallbacks of a policy and whether requests go to them now.

    ``on_hold``/``on_release``: the gateway's hold and release (the hold's start is kept
    across repeated holds until a release). ``engaged``: held at least
    ``failover_after_seconds``. ``admit``/``wait_or_divert``: a waiting request races
    its wait against the failover."""

    def __init__(self, policy: Policy, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "supervisor_gateway_failover_requests_total",
            "Requests answered by a fallback upstream while the local engine was held, "
            "by fallback (gateway.fallbacks[].name).", ["fallback"], registry=registry)
        self.failures = Counter(
            "supervisor_gateway_failover_failures_total",
            "Tries of a fallback that failed (not reachable, 5xx), by fallback.",
            ["fallback"], registry=registry)
        self.log = FailoverLog()
        self.held_since: float | None = time.monotonic()      # the gateway starts held
        self.reason: str | None = "engine starting"
        self._episode: dict[str, Any] | None = None
        self._changed = asyncio.Event()
        self.client: httpx.AsyncClient | None = None
        self.upstreams: list[_Upstream] = []
        self.bound_seconds = 30.0
        self.read_timeout_seconds = 600.0
        self.apply(policy)

    def apply(self, policy: Policy) -> None:
        """The policy's fallbacks, keys and bound (at start and at each reload)."""
        spec = policy.gateway
        self.upstreams = [_Upstream(f, policy) for f in spec.fallbacks]
        self.bound_seconds = spec.failover_after_seconds
        self.read_timeout_seconds = spec.upstream_timeout_seconds
        for u in self.upstreams:
            self.requests.labels(u.name)
            self.failures.labels(u.name)
        self._wake()

    # -- the hold ----------------------------------------------------------------------

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def on_hold(self, reason: str) -> None:
        """The gateway holds (the local engine is not serving) because of ``reason``;
        the first hold of a held period gives its reason (why the engine stopped
        serving), later ones while still held (the restart's own) do not replace it."""
        if self.held_since is None:
            self.held_since = time.monotonic()
            self.reason = reason
        self._wake()

    def on_release(self) -> None:
        """The local engine serves again: requests go to it; an episode ends."""
        held_for = None if self.held_since is None else time.monotonic() - self.held_since
        self.held_since = None
        episode, self._episode = self._episode, None
        if episode is not None:
            entry = self.log.add(event="ended", reason=episode["reason"],
                                 requests=episode["requests"], failures=episode["failures"],
                                 fallbacks=sorted(episode["fallbacks"]),
                                 held_seconds=round(held_for or 0.0, 3),
                                 started_at=episode["at"])
            logger.info("failover ended: the local engine serves again after %.1f s held; "
                        "%d requests served by fallbacks, %d tries failed",
                        entry["held_seconds"], entry["requests"], entry["failures"])
        self._wake()

    @property
    def engaged(self) -> bool:
        """Whether requests go to the fallbacks now."""
        return bool(self.upstreams) and self.held_since is not None and \
            time.monotonic() - self.held_since >= self.bound_seconds

    def covers(self, path: str) -> bool:
        """Whether some fallback speaks ``path``'s API."""
        api = API_OF_PATH.get(path)
        return api is not None and any(api in u.apis for u in self.upstreams)

    async def wait_engaged(self) -> None:
        """Return once the failover is engaged (may never return)."""
        while not self.engaged:
            changed = self._changed
            timeout = None
            if self.held_since is not None and self.upstreams:
                timeout = max(0.0, self.held_since + self.bound_seconds - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout)

    # -- a request ---------------------------------------------------------------------

    async def admit(self, acquire: Awaitable[float], give_back: Callable[[], None],
                    divert: Callable[[], Awaitable[FallbackAnswer | None]],
                    ) -> float | FallbackAnswer:
        """Race the request's wait for a local slot (``acquire``, raises as
        ``Admission.acquire``) against the failover: the seconds it waited (it holds a
        slot), or a fallback's answer (it holds none: a slot granted meanwhile is given
        back with ``give_back``)."""
        task = asyncio.ensure_future(acquire)
        try:
            answer = await self._race(task, divert)
        except BaseException:
            await _drop(task, give_back)
            raise
        if answer is None:
            return task.result()
        await _drop(task, give_back)
        return answer

    async def wait_or_divert(self, wait: Awaitable[bool],
                             divert: Callable[[], Awaitable[FallbackAnswer | None]],
                             ) -> bool | FallbackAnswer:
        """Race a wait for the local engine before a re-send (``wait``: True once it is
        back) against the failover: its result, or a fallback's answer."""
        task = asyncio.ensure_future(wait)
        try:
            answer = await self._race(task, divert)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        return task.result() if answer is None else answer

    async def _race(self, task: asyncio.Future[Any],
                    divert: Callable[[], Awaitable[FallbackAnswer | None]],
                    ) -> FallbackAnswer | None:
        """None once ``task`` is done; a fallback's answer if the failover came first."""
        while not task.done():
            engaged = asyncio.ensure_future(self.wait_engaged())
            try:
                await asyncio.wait({task, engaged}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                engaged.cancel()
            if task.done():
                return None
            answer = await divert()
            if answer is not None:
                return answer
            await asyncio.wait({task}, timeout=RETRY_SECONDS)
        return None

    async def send(self, method: str, path: str, query: str, raw: bytes,
                   body: dict[str, Any], client_headers: list[tuple[str, str]],
                   answer_headers: Callable[[], list[tuple[bytes, bytes]]],
                   done: Callable[[], None] | None) -> FallbackAnswer | None:
        """Send the request to each fallback that speaks ``path``'s API, in order: the
        first answer below 500, or None (each failure counted and logged)."""
        api = API_OF_PATH.get(path)
        for u in self.upstreams:
            if api not in u.apis:
                continue
            try:
                resp = await self._try(u, method, path, query, raw, body, client_headers, api)
            except httpx.HTTPError as exc:
                self._failed(u, type(exc).__name__)
                continue
            if resp.status_code >= 500:
                await resp.aclose()
                self._failed(u, f"HTTP {resp.status_code}")
                continue
            self._served(u)
            headers = [(k, v) for k, v in resp.headers.raw if k.lower() not in _DROP_BACK]
            return FallbackAnswer(resp, [*headers, *answer_headers(),
                                         (SERVED_BY.encode(), u.name.encode())], done)
        return None

    async def _try(self, u: _Upstream, method: str, path: str, query: str, raw: bytes,
                   body: dict[str, Any], client_headers: list[tuple[str, str]],
                   api: str | None) -> httpx.Response:
        if self.client is None:
            self.client = httpx.AsyncClient(timeout=httpx.Timeout(
                self.read_timeout_seconds, connect=CONNECT_SECONDS))
        content = raw
        if u.spec.model is not None and "model" in body:
            content = json.dumps({**body, "model": u.spec.model}).encode()
        headers = [(k, v) for k, v in client_headers if k.lower() not in _DROP_OUT]
        headers.append(("accept-encoding", "identity"))
        if u.key is not None:
            headers.append(("x-api-key", u.key) if api == "messages" else
                           ("authorization", f"Bearer {u.key}"))
        url = u.spec.url + path + (f"?{query}" if query else "")
        request = self.client.build_request(method, url, content=content, headers=headers)
        return await self.client.send(request, stream=True)

    def _episode_now(self) -> dict[str, Any]:
        if self._episode is None:
            self._episode = {"reason": self.reason, "requests": 0, "failures": 0,
                             "fallbacks": set(), "at": time.time()}
            held = 0.0 if self.held_since is None else time.monotonic() - self.held_since
            self.log.add(event="started", reason=self.reason,
                         held_seconds=round(held, 3),
                         fallbacks=[u.name for u in self.upstreams])
            logger.warning("failover: the local engine is held %.1f s (%s): requests go "
                           "to %s", held, self.reason,
                           ", ".join(u.name for u in self.upstreams))
        return self._episode

    def _served(self, u: _Upstream) -> None:
        self.requests.labels(u.name).inc()
        episode = self._episode_now()
        episode["requests"] += 1
        episode["fallbacks"].add(u.name)

    def _failed(self, u: _Upstream, why: str) -> None:
        self.failures.labels(u.name).inc()
        self._episode_now()["failures"] += 1
        logger.warning("failover: fallback %s failed (%s)", u.name, why)

    async def close(self) -> None:
        """Close the fallbacks' connections."""
        if self.client is not None:
            await self.client.aclose()


async def _drop(task: asyncio.Future[float], give_back: Callable[[], None]) -> None:
    """Take back a wait for a slot: cancelled while queued, or the slot given back."""
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return
    if not task.cancelled() and task.exception() is None:
        give_back()

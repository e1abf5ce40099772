"""``Gateway``: the proxy's state and its two faces, for its controller and for uvicorn.

It runs in the gateway's own process (agent_supervisor/gateway/process.py), whose control
channel drives it; tests drive it directly. It has the service's ``GatewayFace``
(agent_supervisor/runtime/gateway_face.py, which ``GatewayLink`` has too): the
``GatewayControl`` (hold before a switch, release after, shed), a ``GatewayLoadSource`` (in
flight, queued, their prompt tokens), ``follow``, ``summary``. It serves with uvicorn in
the event loop of the process that hosts it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable

import httpx
from prometheus_client import CollectorRegistry

from agent_supervisor.gateway.admission import Admission
from agent_supervisor.gateway.cors import Cors
from agent_supervisor.gateway.engine_back import engine_back
from agent_supervisor.gateway.failover import Failover
from agent_supervisor.gateway.key_limits import KeyLimits
from agent_supervisor.gateway.listener.connections import gateway_protocol
from agent_supervisor.gateway.listener.tls import reload_tls, tls_options
from agent_supervisor.gateway.metrics import GatewayMetrics, ResumptionLog
from agent_supervisor.gateway.paths import Routes
from agent_supervisor.gateway.proxy import GatewayApp
from agent_supervisor.gateway.quality import Quality
from agent_supervisor.gateway.upstream import Upstream
from agent_supervisor.policy import Policy
from agent_supervisor.sense.gateway_load import GatewayLoad
from agent_supervisor.serve import AppServer
from agent_supervisor.serve_limits import ListenerLimits

__all__ = ["UPSTREAM_CONNECT_SECONDS", "Gateway"]

logger = logging.getLogger(__name__)

#: Seconds to open a connection to the engine (on one box it is refused or made at once;
#: a SIGSTOPped engine's kernel still accepts, so this is not where a hang shows).
UPSTREAM_CONNECT_SECONDS = 5.0


class Gateway:
    """The proxy in front of the engine of ``policy``, starting in ``rung``'s limits.

    It starts held: requests queue until ``release`` says the engine is ready.
    """

    def __init__(self, policy: Policy, *, rung: int, registry: CollectorRegistry) -> None:
        self.policy = policy
        self.spec = policy.gateway
        eng = policy.engine
        self.base_url = f"http://{eng.host}:{eng.port}"
        self.mode_name = policy.modes[rung].name
        self.rung = rung
        self.on_change: Callable[[], None] | None = None
        """Called after every hold, release, shed and policy change (the gateway
        process saves its state then: agent_supervisor/gateway/process.py)."""
        self.admission = Admission(policy.modes[rung].gateway,
                                   shed_factor=policy.hysteresis.shed_factor,
                                   hold_timeout_seconds=self.spec.hold_timeout_seconds,
                                   max_held=self.spec.max_held_requests,
                                   max_queued_bytes=self.spec.max_queued_bytes)
        self.admission.hold()
        self.hold_reason: str | None = "engine starting"
        """Why the gateway holds (None: admitting), for the readiness probes."""
        self.verdict: str | None = None
        """Why the supervisor calls the engine not ready although it serves (a hang
        suspected, a reboot required), or None: ``set_verdict``."""
        self.verdict_of: Callable[[], str | None] | None = None
        """A verdict to read at each probe instead (``follow``)."""
        self.metrics = GatewayMetrics(registry)
        self.resumptions = ResumptionLog(self.metrics)
        self.routes = self._routes(self.spec.extra_paths)
        self.cors = Cors(self.spec.cors_allow_origins)
        """The browser origins allowed (agent_supervisor/gateway/cors.py)."""
        self.key_digests = frozenset(k.sha256 for k in self.spec.api_keys)
        self.key_names = {k.sha256: k.name for k in self.spec.api_keys}
        self.keys = KeyLimits(registry)
        """Each key's own limits and counters (agent_supervisor/gateway/key_limits.py)."""
        self.keys.apply(self.spec.api_keys)
        env = self.spec.upstream_api_key_env
        self.upstream_key = os.environ.get(env) if env else None
        self.quality = Quality(registry, repeat_units=self.spec.degenerate_repeat_units,
                               keep_shapes=self.spec.sample_request_shapes)
        self.epoch = 0
        """Bumped at every hold: a request that started in an older epoch met a switch."""
        self._ready = asyncio.Event()
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(10.0))
        """For the occasional side request (/tokenize)."""
        self.upstream: Upstream | None = None
        """The proxied traffic's client (agent_supervisor/gateway/upstream.py): made in
        ``start``, in the loop that serves."""
        self.failover = Failover(policy, registry)
        """The fallback upstreams while the engine is held (gateway/failover.py)."""
        self.advising_of: Callable[[], bool] | None = None
        """Whether the supervisor only advises, read on use (``follow``; issue 31)."""
        self.advise = False
        """Sent by the supervisor (``POST /control/supervision``): it only advises."""
        self.app = GatewayApp(self)
        self._server: AppServer | None = None

    @staticmethod
    def _routes(extra_paths: list[str]) -> Routes:
        routes = Routes(extra_paths)
        if routes.ignored:
            logger.warning("gateway.extra_paths: not forwarded, engine admin paths or not in "
                           "normal form: %s", ", ".join(routes.ignored))
        return routes

    # -- GatewayLoadSource -----------------------------------------------------------

    def gateway_load(self) -> GatewayLoad:
        """What the gateway holds now (prompt tokens are the gateway's estimates)."""
        a = self.admission
        self.metrics.in_flight.set(a.in_flight)
        self.metrics.queued.set(a.queued)
        q = self.quality
        return GatewayLoad(a.in_flight, a.queued, a.prompt_tokens_in_flight,
                           a.prompt_tokens_queued, q.repeated_prefix_tokens_total,
                           q.parser_errors_total, q.degenerate_streams_total,
                           overrun_answers_total=q.overrun_answers_total)

    # -- GatewayControl --------------------------------------------------------------

    async def hold(self, reason: str, *, drain: bool = True) -> None:
        """Stop admitting (new requests queue); with ``drain``, wait until in-flight
        requests finish or ``drain_timeout_seconds`` pass."""
        self.admission.hold()
        self.hold_reason = reason
        self._ready.clear()
        self.failover.on_hold(reason)
        self.epoch += 1
        logger.info("gateway holding new requests (%s); %d in flight", reason,
                    self.admission.in_flight)
        if drain and self.admission.in_flight:
            done = await self.admission.drained(self.spec.drain_timeout_seconds)
            logger.info("gateway drain %s: %d still in flight", "complete" if done else
                        "timed out", self.admission.in_flight)
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def release(self, rung: int) -> None:
        """The engine serves in ``rung``: its limits apply and the queue moves."""
        self.mode_name = self.policy.modes[rung].name
        self.rung = rung
        self.admission.set_limits(self.policy.modes[rung].gateway)
        self.admission.set_shed(False)
        self._ready.set()
        self.failover.on_release()
        self.hold_reason = None
        self.admission.release()
        logger.info("gateway admitting for mode %s (%d queued)", self.mode_name,
                    self.admission.queued)
        self._changed()

    def apply_policy(self, policy: Policy, rung: int) -> None:
        """A reloaded policy: keys, the upstream key, limits and timeouts at once (the
        listeners cannot change while running; the service refuses such a reload)."""
        self.policy = policy
        self.spec = policy.gateway
        self.key_digests = frozenset(k.sha256 for k in self.spec.api_keys)
        self.key_names = {k.sha256: k.name for k in self.spec.api_keys}
        self.keys.apply(self.spec.api_keys)
        env = self.spec.upstream_api_key_env
        self.upstream_key = os.environ.get(env) if env else None
        if self.upstream is not None:
            self.upstream.read_timeout_seconds = self.spec.upstream_timeout_seconds
        self.quality.repeat_units = self.spec.degenerate_repeat_units
        self.quality.keep(self.spec.sample_request_shapes)
        self.admission.shed_factor = policy.hysteresis.shed_factor
        self.admission.hold_timeout_seconds = self.spec.hold_timeout_seconds
        self.admission.max_held = self.spec.max_held_requests
        self.admission.max_queued_bytes = self.spec.max_queued_bytes
        self.routes = self._routes(self.spec.extra_paths)
        self.cors = Cors(self.spec.cors_allow_origins)
        self.failover.apply(policy)
        self.mode_name = policy.modes[rung].name
        self.rung = rung
        self.admission.set_limits(policy.modes[rung].gateway)
        refused = self.reload_tls(policy)
        if refused is not None:
            logger.error("gateway: the certificate in use stays: %s", refused)
        self._changed()

    def reload_tls(self, policy: Policy) -> str | None:
        """Read ``policy``'s certificate files again into the listener (new connections
        get them: agent_supervisor/gateway/listener/tls.py); why refused, or None."""
        if self._server is None:
            return None
        return reload_tls(self._server.server.config.ssl, policy)

    def set_shed(self, shed: bool) -> None:
        """Lower (True) or restore the current mode's limits."""
        self.admission.set_shed(shed)
        self._changed()

    def set_verdict(self, reason: str | None) -> None:
        """The supervisor's word on readiness beyond hold and release: why the engine
        should get no traffic although it answers (None: nothing against it)."""
        if reason != self.verdict:
            logger.info("gateway readiness verdict: %s -> %s", self.verdict or "healthy",
                        reason or "healthy")
        self.verdict = reason

    def follow(self, verdict: Callable[[], str | None],
               advising: Callable[[], bool]) -> None:
        """Read the readiness verdict and whether the supervisor only advises from these
        at each use, instead of what ``set_verdict`` and ``advise`` say."""
        self.verdict_of, self.advising_of = verdict, advising

    def summary(self) -> dict[str, object]:
        """Held or not and the load, for the supervisor's status."""
        a = self.admission
        return {"held": a.held, "requests_in_flight": a.in_flight,
                "requests_queued": a.queued, "max_concurrency": a.max_concurrency}

    async def refresh(self) -> None:
        """Nothing to fetch: its counters are on the registry it was given."""

    # -- for the proxy ----------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether the engine is serving (not starting, not being switched)."""
        return self._ready.is_set()

    @property
    def advising(self) -> bool:
        """Whether the supervisor only advises (``mode: advise``): nothing will restart
        an engine that fails, so a failure is passed on at once, not waited out."""
        return self.advising_of() if self.advising_of is not None else self.advise

    def switched(self, epoch: int) -> bool:
        """Whether a hold happened since ``epoch`` (or one is going on)."""
        return self.epoch != epoch or self.admission.held

    async def wait_engine(self, epoch: int) -> bool:
        """After a failure that may mean the engine is gone: wait until a switch since
        ``epoch`` has completed, or, with no switch noticed within a short grace (the
        supervisor away, or the failure was not a crash), until the engine's /health
        answers 200 (``engine_back``), at most ``hold_timeout_seconds``. False: it never
        came back."""
        t0 = time.monotonic()
        deadline = t0 + self.spec.hold_timeout_seconds
        if self.advising and not self.switched(epoch):
            return False               # advise mode: no restart is coming (issue 31)
        while time.monotonic() < deadline:
            if self.switched(epoch):
                return await self.wait_ready()
            if await engine_back(self, epoch, time.monotonic() - t0):
                return True
            await asyncio.sleep(0.1)
        return False

    async def engine_healthy(self) -> bool:
        """Whether the engine's /health answers 200 now (vLLM: 503 or no answer when its
        engine process is dead, PR #24897)."""
        try:
            resp = await self.client.get(self.base_url + "/health", timeout=2.0)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    async def wait_ready(self) -> bool:
        """Wait until the engine is ready again (at most ``hold_timeout_seconds``)."""
        try:
            await asyncio.wait_for(self._ready.wait(), self.spec.hold_timeout_seconds)
        except TimeoutError:
            return False
        return True

    # -- serving ---------------------------------------------------------------------

    async def start(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve on ``gateway.host:port`` in the running loop (or on ``sockets``, already
        listening). Raises OSError if the port cannot be bound."""
        self.upstream = Upstream(self.policy.engine.host, self.policy.engine.port,
                                 connect_timeout_seconds=UPSTREAM_CONNECT_SECONDS,
                                 read_timeout_seconds=self.spec.upstream_timeout_seconds)
        spec = self.spec
        limits = ListenerLimits(
            max_connections=spec.max_connections, max_header_bytes=spec.max_header_bytes,
            header_timeout_seconds=spec.header_timeout_seconds,
            max_body_bytes=None,                  # the proxy's 413, in the caller's shape
            body_timeout_seconds=spec.body_timeout_seconds,
            idle_timeout_seconds=spec.idle_timeout_seconds,
            write_timeout_seconds=spec.write_timeout_seconds)
        self._server = AppServer(self.app, self.spec.host, self.spec.port, name="gateway",
                                 limits=limits, http=gateway_protocol(limits),
                                 timeout_graceful_shutdown=max(
                                     1, int(self.spec.drain_timeout_seconds)),
                                 # No X-Forwarded-* rewriting of the client's address
                                 # (uvicorn's ProxyHeadersMiddleware): nothing here
                                 # reads it, and it is a layer on every request.
                                 proxy_headers=False, **tls_options(self.policy))
        await self._server.start(sockets)
        logger.info("gateway: OpenAI API for agents at %s://%s:%d/v1",
                    "https" if self.spec.tls else "http", self.spec.host, self.spec.port)

    async def drain(self) -> None:
        """Before a hand-over or a stop: accept no more connections, answer what still
        comes on open ones with ``Connection: close``, and wait until no connection is
        left open (idle ones end at ``gateway.idle_timeout_seconds``, 5 s) or
        ``drain_timeout_seconds`` pass. Closing an idle keep-alive connection at once,
        as a plain shutdown does, races a client sending on it (seen: a reset)."""
        if self._server is None:
            return
        self.app.closing = True
        self._server.stop_accepting()
        deadline = time.monotonic() + self.spec.drain_timeout_seconds
        while self._server.open_connections and time.monotonic() < deadline:
            await asyncio.sleep(0.1)

    async def stop(self, *, leave_running: bool = False) -> None:
        """Stop serving and close the upstream connections (``leave_running`` is for a
        gateway process's link: in-process, the gateway ends with its process)."""
        if self._server is not None:
            await self._server.stop()
        await self.client.aclose()
        await self.failover.close()
        if self.upstream is not None:
            await self.upstream.close()

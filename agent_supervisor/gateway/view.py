"""``GatewayView``: what the proxy, the streams, the probes and the gateway's own API read
of the ``Gateway`` (issue 30).

The ``Gateway`` (agent_supervisor/gateway/server.py) builds the proxy's app and hands it
itself; the modules that serve requests (``proxy.py``, ``streaming.py``, ``models.py``,
``own_api.py``, ``readiness.py``) take it as this protocol, so none of them imports
``server.py`` and the arrows run one way: server -> proxy -> streaming -> view. The
``Gateway`` satisfies it structurally (mypy checks it where ``GatewayApp(self)`` is built).
They read these members and assign none; ``hold``, ``release`` and ``apply_policy`` (the
supervisor's side) change them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import httpx

    from agent_supervisor.gateway.admission import Admission
    from agent_supervisor.gateway.cors import Cors
    from agent_supervisor.gateway.failover import Failover
    from agent_supervisor.gateway.key_limits import KeyLimits
    from agent_supervisor.gateway.metrics import GatewayMetrics, ResumptionLog
    from agent_supervisor.gateway.paths import Routes
    from agent_supervisor.gateway.quality import Quality
    from agent_supervisor.gateway.upstream import Upstream
    from agent_supervisor.policy import Policy
    from agent_supervisor.policy.gateway import GatewaySpec

__all__ = ["GatewayView"]


class GatewayView(Protocol):
    """The gateway as the request path sees it (the attributes are the ``Gateway``'s own,
    documented there)."""

    # -- the policy and the mode served ------------------------------------------------
    policy: Policy
    spec: GatewaySpec
    """``policy.gateway``."""
    mode_name: str
    rung: int
    base_url: str
    """The engine's ``http://host:port``."""

    # -- what the gateway holds --------------------------------------------------------
    admission: Admission
    epoch: int
    """Bumped at every hold: a request that started in an older epoch met a switch."""
    hold_reason: str | None
    verdict: str | None
    verdict_of: Callable[[], str | None] | None

    # -- the parts a request goes through ----------------------------------------------
    routes: Routes
    cors: Cors
    key_digests: frozenset[str]
    key_names: dict[str, str]
    keys: KeyLimits
    upstream_key: str | None
    quality: Quality
    metrics: GatewayMetrics
    resumptions: ResumptionLog
    client: httpx.AsyncClient
    """For the occasional side request (/tokenize, /health)."""
    upstream: Upstream | None
    """The proxied traffic's client; None until ``Gateway.start``."""
    failover: Failover
    """The fallback upstreams while the engine is held (gateway/failover.py)."""

    # -- is the engine there -----------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Whether the engine is serving (not starting, not being switched)."""

    @property
    def advising(self) -> bool:
        """Whether the supervisor only advises: no restart will come after a failure."""

    def switched(self, epoch: int) -> bool:
        """Whether a hold happened since ``epoch`` (or one is going on)."""

    async def wait_engine(self, epoch: int) -> bool:
        """After a failure: wait until the engine is back (False: it never came back)."""

    async def engine_healthy(self) -> bool:
        """Whether the engine's /health answers 200 now."""

    async def wait_ready(self) -> bool:
        """Wait until the engine is ready again (False: ``hold_timeout_seconds`` passed)."""

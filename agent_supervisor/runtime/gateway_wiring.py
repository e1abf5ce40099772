"""``follow``: what the service tells its gateway beyond hold and release (issue 31),
through the one ``GatewayFace`` (agent_supervisor/runtime/gateway_face.py): the readiness
verdict (the ladder's, and while advising the last decision's: ``advised_verdict``) and
whether the service advises (the gateway then passes an engine failure on at once). The
link records the gateway's failovers itself (``failover_incident``,
agent_supervisor/runtime/gateway_record.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from agent_supervisor.decide.decision import Decision
from agent_supervisor.runtime.gateway_face import GatewayFace
from agent_supervisor.runtime.gateway_link import make_gateway, readiness_verdict
from agent_supervisor.runtime.gateway_record import advised_verdict
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from agent_supervisor.gateway.server import Gateway
    from agent_supervisor.policy import PolicyHolder
    from agent_supervisor.runtime.gateway_link import GatewayLink
    from agent_supervisor.runtime.status import LastDecision
    from agent_supervisor.runtime.supervision import Supervision

    def _one_face(gateway: Gateway, link: GatewayLink) -> tuple[GatewayFace, GatewayFace]:
        """Never called: mypy checks here that both have the one face."""
        return gateway, link

__all__ = ["follow", "gateway_for"]


class _Service(Protocol):
    """What ``gateway_for`` reads of the ``Supervisor`` (agent_supervisor/service.py);
    ``supervision`` and ``last`` are read later, at each poll, once they exist."""

    holder: PolicyHolder
    registry: CollectorRegistry
    recorder: Recorder
    ladder: Ladder
    supervision: Supervision
    last: LastDecision


def gateway_for(service: _Service) -> GatewayFace | None:
    """``make_gateway`` for ``service``'s policy, then ``follow``: its readiness verdict,
    whether the service advises (``service.supervision``) and the last decision
    (``service.last``), read at each use."""
    gateway = make_gateway(service.holder, service.registry, service.recorder,
                           service.ladder)
    follow(gateway, service.ladder, lambda: service.supervision.advising,
           lambda: service.last.decision)
    return gateway


def follow(gateway: GatewayFace | None, ladder: Ladder, advising: Callable[[], bool],
           last: Callable[[], Decision | None]) -> None:
    """Make ``gateway``'s readiness follow the ladder and, while advising, the last
    decision; tell it whether the service advises."""
    if gateway is None:
        return

    def verdict() -> str | None:
        return readiness_verdict(ladder.state) or advised_verdict(advising(), last())

    gateway.follow(verdict, advising)

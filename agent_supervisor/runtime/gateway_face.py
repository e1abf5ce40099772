"""``GatewayFace``: the one face of the gateway the service holds (issue 30 item 2).

Two classes have it: ``GatewayLink`` (agent_supervisor/runtime/gateway_link.py), the link
to the gateway's own process, which is what the service runs (always: a policy given in
memory is written for the process to read), and ``Gateway``
(agent_supervisor/gateway/server.py), the proxy itself, which that process hosts and tests
drive directly. The service, its listeners, its status and its wiring type against this
protocol and never ask which one they have. It covers the executor's ``GatewayControl``
(act/effects.py: hold, release, shed) and the sensors' ``GatewayLoadSource``
(sense/collect.py: ``gateway_load``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from agent_supervisor.policy.model import Policy
from agent_supervisor.sense.gateway_load import GatewayLoad

__all__ = ["GatewayFace"]


@runtime_checkable
class GatewayFace(Protocol):
    """What the service asks of its gateway, wherever it runs."""

    async def start(self) -> None:
        """Serve (or reach the process that serves). Raises ListenError (an OSError)
        when the gateway cannot listen."""

    async def stop(self, *, leave_running: bool = False) -> None:
        """Stop serving (``leave_running``: a gateway process keeps serving for the next
        life of the supervisor; an in-process gateway ends with its process anyway)."""

    async def hold(self, reason: str, *, drain: bool = True) -> None:
        """Stop admitting (new requests queue); with ``drain``, return once in-flight
        requests finished or ``drain_timeout_seconds`` passed."""

    def release(self, rung: int) -> None:
        """The engine serves in ``rung``: its limits apply and the queue moves."""

    def set_shed(self, shed: bool) -> None:
        """Lower (True) or restore the current mode's limits."""

    def apply_policy(self, policy: Policy, rung: int) -> None:
        """A reloaded policy, in force from now on."""

    def follow(self, verdict: Callable[[], str | None],
               advising: Callable[[], bool]) -> None:
        """Read the service's readiness verdict (None: nothing against the engine) and
        whether it only advises from these, from now on."""

    def gateway_load(self) -> GatewayLoad | None:
        """What the gateway holds now (None: not known lately)."""

    def summary(self) -> dict[str, object]:
        """Held or not and the load, for the service's status."""

    async def refresh(self) -> None:
        """Make the gateway's counters on the service's registry current (before a
        /metrics scrape)."""

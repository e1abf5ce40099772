"""``engine_back``: "is the engine back?" after a failure, asked in one place (issue 30).

The gateway's waits after an engine failure all ask it: ``Gateway.wait_engine`` (a
request whose answer failed, agent_supervisor/gateway/server.py; the proxy's 5xx check,
proxy.py, ends there too) and a cut stream holding its client (streaming.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_supervisor.gateway.view import GatewayView

__all__ = ["NO_SWITCH_GRACE_SECONDS", "engine_back"]

#: A failure with no hold noticed: the supervisor's tick is 1 s and a crash is seen
#: within a tick or two, so wait this long before asking the engine itself whether it
#: serves (the supervisor may be away: its gateway outlives it).
NO_SWITCH_GRACE_SECONDS = 3.0


async def engine_back(gw: GatewayView, epoch: int, waited_seconds: float) -> bool:
    """Whether the engine serves again, ``waited_seconds`` after a failure met in
    ``epoch`` (``Gateway.epoch``, bumped at every hold): the gateway admits (``ready``)
    and either a switch happened since (a new epoch: the supervisor restarted it) or,
    with none noticed for ``NO_SWITCH_GRACE_SECONDS``, the engine's /health answers 200
    (vLLM: 503 or no answer once its engine process is dead, PR #24897). False: not
    yet; the caller asks again (every 0.1 s) until its own deadline. Never raises."""
    if not gw.ready:
        return False
    if gw.epoch != epoch:
        return True
    return waited_seconds >= NO_SWITCH_GRACE_SECONDS and await gw.engine_healthy()

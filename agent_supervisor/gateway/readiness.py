"""Probes for load balancers (issue 31 item 4): ``/livez``, ``/ready`` and ``/readyz``.

Served by the gateway itself, without a key (a load balancer or the kubelet sends none),
never forwarded: vLLM 0.32.0's API server has no such route (its ``/health`` answers
200 on a hung engine, vllm PR #24897; ``/ping`` is SageMaker's), and the same names with
the same 200/503 meaning are what vLLM's own data-parallel launcher serves on its port
(vllm/entrypoints/launchers/dp_supervisor.py: ``/ready``, ``/readyz``), as Kubernetes'
API server does (``/livez``, ``/readyz``).

==========  =================================================================================
``/livez``  200 ``{"live": true}`` while the gateway process runs
``/ready``  200 ``{"ready": true, "reason": "serving (mode M)", ...}`` only when the engine
``/readyz`` serves and the supervisor has nothing against it; else 503 with the reason:
            ``held: engine starting (mode M)``, ``held: restart: engine_exited (mode M)``
            (held while the engine starts or is switched), the supervisor's verdict
            (``engine hang suspected: ...``, ``reboot required: ...``), or ``engine not
            answering /health`` (the engine gone with no supervisor to say so yet)
==========  =================================================================================

The body also carries ``mode``, ``rung`` and ``held``. The engine's ``/health`` is asked at
most once every ``HEALTH_CACHE_SECONDS`` however often the probes come.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response

if TYPE_CHECKING:
    from agent_supervisor.gateway.view import GatewayView

__all__ = ["HEALTH_CACHE_SECONDS", "LIVE_PATH", "PROBE_PATHS", "READY_PATHS", "Readiness"]

LIVE_PATH = b"/livez"
READY_PATHS = frozenset({b"/ready", b"/readyz"})
PROBE_PATHS = READY_PATHS | {LIVE_PATH}
#: A probe's answer about the engine's /health is reused this long (seconds): load
#: balancers probe every few seconds from every node, and the engine should not see each.
HEALTH_CACHE_SECONDS = 1.0


class Readiness:
    """The probes' answers over ``gw``."""

    def __init__(self, gw: GatewayView) -> None:
        self.gw = gw
        self._health: tuple[float, bool] | None = None

    async def _engine_answers(self) -> bool:
        now = time.monotonic()
        if self._health is None or now - self._health[0] >= HEALTH_CACHE_SECONDS:
            self._health = (now, await self.gw.engine_healthy())
        return self._health[1]

    async def verdict(self) -> tuple[bool, str]:
        """(ready, reason): the supervisor's verdict first, then a hold, then the engine."""
        gw = self.gw
        mode = f"(mode {gw.mode_name})"
        said = gw.verdict_of() if gw.verdict_of is not None else gw.verdict
        if said is not None:
            return False, f"{said} {mode}"
        if gw.admission.held or not gw.ready:
            return False, f"held: {gw.hold_reason or 'engine not ready'} {mode}"
        if not await self._engine_answers():
            return False, f"engine not answering /health {mode}"
        return True, f"serving {mode}"

    async def respond(self, raw_path: bytes, method: str) -> Response:
        """The answer to a probe on ``raw_path`` (one of ``PROBE_PATHS``)."""
        if method not in ("GET", "HEAD"):
            return JSONResponse({"error": f"{raw_path.decode()} takes GET"}, status_code=405,
                                headers={"Allow": "GET, HEAD"})
        if raw_path == LIVE_PATH:
            return JSONResponse({"live": True})
        ready, reason = await self.verdict()
        gw = self.gw
        body: dict[str, Any] = {"ready": ready, "reason": reason, "mode": gw.mode_name,
                                "rung": gw.rung, "held": gw.admission.held}
        return JSONResponse(body, status_code=200 if ready else 503,
                            headers={"Cache-Control": "no-store"})

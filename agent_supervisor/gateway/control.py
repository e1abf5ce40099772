"""The gateway process's control channel: what its supervisor asks of it.

Served on a Unix socket in the state directory (``gateway.sock``, mode 0600 inside the
0700 state directory: only the service user reaches it, so it needs no token), over HTTP:

==============================  ==============================================================
``GET /control/state?since=N``  pid, owner, rung, mode, held, shed, ready, the load
                                (``GatewayLoad``'s fields), the resumptions numbered above N and
                                the failover entries above ``failover_since``
``GET /control/metrics``        the gateway's Prometheus text (the supervisor re-exports it)
``POST /control/hold``          ``{"reason", "drain"}``: stop admitting, maybe drain; answers
                                when done
``POST /control/release``       ``{"rung"}``: the engine serves in that rung
``POST /control/shed``          ``{"shed"}``: lower or restore the mode's limits
``POST /control/verdict``       ``{"reason"}``: why the engine is not ready although it
                                serves (a hang suspected, a reboot required), or null: the
                                readiness probes say it (agent_supervisor/gateway/readiness.py)
``POST /control/policy``        ``{"rung", "sha256"}``: read the policy file again; its bytes
                                must have ``sha256`` (the digest the supervisor validated).
                                400: refused, the old one stays; the detail is ``{"reason",
                                "sha256_read", "sha256_expected"}``
``POST /control/supervision``   ``{"mode"}``: ``act`` or ``advise`` (the supervisor only advises:
                                an engine failure is passed on at once, issue 31)
``POST /control/stop``          drain and exit (``{"handover": true}``: hand the sockets to a
                                new process first)
==============================  ==============================================================
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from fastapi import FastAPI, HTTPException
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import Response

if TYPE_CHECKING:
    from agent_supervisor.gateway.server import Gateway

__all__ = ["Refusal", "control_app"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HoldBody(_Body):
    """``POST /control/hold``."""

    reason: str = "supervisor"
    drain: bool = True


class RungBody(_Body):
    """``POST /control/release``."""

    rung: int


class PolicyBody(RungBody):
    """``POST /control/policy``: ``sha256`` of the file the supervisor validated (None:
    no check, a supervisor that sends none)."""

    sha256: str | None = None


@dataclass(frozen=True)
class Refusal:
    """Why the gateway process refused a reload: ``reason`` (the file, the field and the
    problem, never a secret's value) and ``sha256_read`` (hex digest of the bytes it read;
    None: it could not read them)."""

    reason: str
    sha256_read: str | None


class ShedBody(_Body):
    """``POST /control/shed``."""

    shed: bool


class VerdictBody(_Body):
    """``POST /control/verdict``."""

    reason: str | None = None


class SupervisionBody(_Body):
    """``POST /control/supervision``."""

    mode: Literal["act", "advise"]


class StopBody(_Body):
    """``POST /control/stop``."""

    handover: bool = False


def _check(gw: Gateway, rung: int) -> None:
    if not 0 <= rung < len(gw.policy.modes):
        raise HTTPException(400, f"rung {rung} is not in this policy's ladder "
                            f"(0..{len(gw.policy.modes) - 1})")


def _on_every_request(app: FastAPI, contact: Callable[[], None]) -> None:
    """``contact()`` before each request is handled."""
    @app.middleware("http")
    async def contacted(request: Request, call_next: Any) -> Any:
        contact()
        return await call_next(request)


def _levers(app: FastAPI, gw: Gateway) -> None:
    """The instant levers: shed and the readiness verdict."""
    @app.post("/control/shed")
    async def shed(body: ShedBody) -> dict[str, Any]:
        """Lower or restore the limits."""
        gw.set_shed(body.shed)
        return {"shed": body.shed}

    @app.post("/control/verdict")
    async def verdict(body: VerdictBody) -> dict[str, Any]:
        """The supervisor's readiness verdict (null: nothing against the engine)."""
        gw.set_verdict(body.reason)
        return {"verdict": gw.verdict}

    @app.post("/control/supervision")
    async def supervision(body: SupervisionBody) -> dict[str, Any]:
        """Whether the supervisor acts or only advises."""
        gw.advise = body.mode == "advise"
        return {"mode": body.mode}


def control_app(gw: Gateway, registry: CollectorRegistry, *, owner: str,
                reload: Callable[[int, str | None], Refusal | None],
                stop: Callable[[bool], None],
                contact: Callable[[], None]) -> FastAPI:
    """The control API over ``gw``. ``reload(rung, sha256)``: read the policy file again,
    refusing bytes whose digest is not ``sha256`` (a ``Refusal``, or None);
    ``stop(handover)``: begin a graceful exit; ``contact()``: at each request (a
    supervisor is there). ``owner``: ``supervisor`` (spawned by it: it stops
    the gateway at its own clean stop) or ``external`` (systemd's)."""
    app = FastAPI(title="supervisor gateway control", docs_url=None, redoc_url=None,
                  openapi_url=None)
    _on_every_request(app, contact)

    @app.get("/control/state")
    async def state(since: int = 0, failover_since: int = 0) -> dict[str, Any]:
        """The gateway's state, load, new resumptions and new failover entries
        (agent_supervisor/gateway/failover.py, numbered above ``failover_since``)."""
        a = gw.admission
        return {"pid": os.getpid(), "owner": owner, "rung": gw.rung, "mode": gw.mode_name,
                "held": a.held, "shed": a.shed, "ready": gw.ready, "epoch": gw.epoch,
                "verdict": gw.verdict,
                "load": asdict(gw.gateway_load()), "summary": gw.summary(),
                "resumptions": [r for r in gw.resumptions.recent if r["seq"] > since],
                "failovers": [f for f in gw.failover.log.recent if f["seq"] > failover_since],
                "advise": gw.advise}

    @app.get("/control/metrics")
    async def metrics() -> Response:
        """The gateway's counters (Prometheus text)."""
        gw.gateway_load()                            # the gauges, fresh
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/control/hold")
    async def hold(body: HoldBody) -> dict[str, Any]:
        """Stop admitting; with ``drain``, wait for in-flight requests."""
        await gw.hold(body.reason, drain=body.drain)
        return {"held": True, "requests_in_flight": gw.admission.in_flight}

    @app.post("/control/release")
    async def release(body: RungBody) -> dict[str, Any]:
        """Admit again in ``rung``'s limits."""
        _check(gw, body.rung)
        gw.release(body.rung)
        return {"held": False, "mode": gw.mode_name}

    _levers(app, gw)

    @app.post("/control/policy")
    async def policy(body: PolicyBody) -> dict[str, Any]:
        """Read the policy file again (its bytes must have the digest sent)."""
        refused = reload(body.rung, body.sha256)
        if refused is not None:
            raise HTTPException(400, {"reason": refused.reason,
                                      "sha256_read": refused.sha256_read,
                                      "sha256_expected": body.sha256})
        return {"mode": gw.mode_name}

    @app.post("/control/stop")
    async def stop_(body: StopBody) -> dict[str, Any]:
        """Drain and exit (after handing the sockets over, with ``handover``)."""
        stop(body.handover)
        return {"stopping": True, "handover": body.handover}

    return app

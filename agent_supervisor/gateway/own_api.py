"""The gateway's own small API under ``/gateway/`` (FastAPI): health, status and the
sampled request shapes. Moved out of agent_supervisor/gateway/proxy.py unchanged."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

if TYPE_CHECKING:
    from agent_supervisor.gateway.view import GatewayView

__all__ = ["gateway_api"]


def gateway_api(gw: GatewayView) -> FastAPI:
    """The FastAPI app for ``/gateway/`` over ``gw``."""
    app = FastAPI(title="supervisor gateway", docs_url=None, redoc_url=None,
                  openapi_url=None)

    @app.get("/gateway/health")
    async def health() -> dict[str, Any]:
        """The gateway is up (whatever the engine's state)."""
        return {"status": "ok", "engine_ready": gw.ready}

    @app.get("/gateway/shapes")
    async def shapes() -> dict[str, Any]:
        """The recent requests' shapes (numbers only), if the policy opted in."""
        kept = gw.quality.shapes
        return {"enabled": bool(kept.maxlen), "shapes": list(kept)}

    @app.get("/gateway/status")
    async def status() -> dict[str, Any]:
        """Mode, limits in force and load."""
        a = gw.admission
        return {"mode": gw.mode_name, "held": a.held, "shed": a.shed,
                "engine_ready": gw.ready, "max_concurrency": a.max_concurrency,
                "max_queue": a.max_queue,
                "max_prompt_tokens": a.limits.max_prompt_tokens,
                "requests_in_flight": a.in_flight, "requests_queued": a.queued,
                "bytes_queued": a.queued_bytes,
                "resumptions": list(gw.resumptions.recent)[-20:],
                "parser_errors_by_agent": dict(gw.quality.by_agent),
                "degenerate_answers": gw.quality.degenerate_streams_total,
                "repeated_prefix_tokens": gw.quality.repeated_prefix_tokens_total}

    return app

"""``create_admin_app``: the FastAPI app of the admin API, /metrics and the dashboard."""

from __future__ import annotations

import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from agent_supervisor import __version__
from agent_supervisor.resources import static_dir
from agent_supervisor.show.api import (
    actions,
    calibration,
    engine_log,
    fleet,
    incidents,
    starts,
    status,
    telemetry,
    transitions,
)
from agent_supervisor.show.api.deps import (
    LOOPBACK_NAMES,
    AdminBackend,
    ReadAccess,
    allowed_host,
    is_loopback,
)

__all__ = ["STATIC", "create_admin_app", "load_token"]

#: The dashboard page's files, found through importlib.resources (issue 28).
STATIC = static_dir()


def load_token(sup: AdminBackend) -> str | None:
    """The actions' bearer token: the systemd credential ``admin_token``, else
    ``admin.token_file`` (stripped), else ``admin.token_env``.

    Raises: PolicyError when the file cannot be read (named, its content never shown).
    """
    spec = sup.policy.admin
    return (sup.policy.secret("admin_token", spec.token_file)
            or os.environ.get(spec.token_env) or None)


def create_admin_app(sup: AdminBackend, *, token: str | None = None) -> FastAPI:
    """Routes: /api/status, /api/incidents[/{id}], /api/transitions, /api/telemetry,
    /api/actions/{action}, /api/engine/log, /api/engine/starts, /api/fleet,
    /api/calibration, /metrics, and the dashboard at /.
    OpenAPI at /docs."""
    app = FastAPI(title="agent-serving supervisor", version=__version__,
                  description="Admin API of the reliability supervisor: status, incidents, "
                  "transitions, telemetry and operator actions (actions need the bearer "
                  "token).")
    app.state.supervisor = sup
    app.state.token = token
    app.state.reads_open = is_loopback(sup.policy.admin.host)
    for module in (status, incidents, transitions, telemetry, actions, engine_log, starts,
                   fleet, calibration):
        app.include_router(module.router)
    spec = sup.policy.admin
    hosts = frozenset({*LOOPBACK_NAMES, *(h.lower() for h in spec.allowed_hosts),
                       *([] if spec.host in ("0.0.0.0", "::", "") else [spec.host.lower()])})

    @app.middleware("http")
    async def check_host(request: Request, call_next):
        """Refuse a request whose Host header is not ours (DNS rebinding, issue 17)."""
        if not allowed_host(request.headers.get("host"), hosts):
            return JSONResponse({"error": {"message": "unknown Host header (add the name to "
                                           "admin.allowed_hosts)", "type": "admin_error",
                                           "code": 421}, "src": "supervisor"}, status_code=421)
        return await call_next(request)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Every error in one shape (the OpenAI error object, marked as ours)."""
        return JSONResponse({"error": {"message": str(exc.detail), "type": "admin_error",
                                       "code": exc.status_code}, "src": "supervisor"},
                            status_code=exc.status_code, headers=exc.headers)

    @app.get("/metrics", dependencies=[ReadAccess], tags=["metrics"])
    async def metrics() -> Response:
        """The supervisor's own Prometheus metrics (and its gateway process's)."""
        await sup.before_scrape()
        return Response(generate_latest(sup.registry), media_type=CONTENT_TYPE_LATEST)

    app.mount("/", StaticFiles(directory=STATIC, html=True), name="dashboard")
    return app

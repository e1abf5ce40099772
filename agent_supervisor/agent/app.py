"""The agent's HTTP API (every route needs the bearer token, ``distributed.agent_token*``).

- ``GET /v1/node/sample``: the node's latest ``NodeSample`` (its own fields) and the
  agent's UTC clock, for the head's freshness and clock checks.
- ``GET /v1/node/lines?limit=N``: recent kernel lines and rank log lines (incidents).
- ``POST /v1/node/rank/start`` ``{mode, run_id, start_args}``: start the headless rank
  (409 when one runs, 400 for an unknown mode, 500 when the spawn fails).
- ``POST /v1/node/rank/stop`` ``{reason, kill}``: stop it (SIGTERM, grace, SIGKILL to its
  group; ``kill``: SIGKILL at once); answers with what is left and the node's memory.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request

from agent_supervisor.agent.node import NodeAgent
from agent_supervisor.errors import EngineStartError
from agent_supervisor.show.api.deps import require_token

__all__ = ["create_agent_app"]


class StartIn(BaseModel):
    """The head's order to start this node's rank."""

    model_config = ConfigDict(extra="forbid")
    mode: str
    run_id: str
    start_args: list[tuple[str, Any]] = []


class StopIn(BaseModel):
    """The head's order to stop it."""

    model_config = ConfigDict(extra="forbid")
    reason: str = "head asked"
    kill: bool = False


def create_agent_app(agent: NodeAgent, *, token: str) -> FastAPI:
    """The app; ``token``: the bearer token every request must carry."""
    app = FastAPI(title="supervisor agent", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(require_token)])
    app.state.token = token

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Every error in one shape, marked as ours."""
        return JSONResponse({"error": {"message": str(exc.detail), "type": "agent_error",
                                       "code": exc.status_code}, "src": "supervisor"},
                            status_code=exc.status_code, headers=exc.headers)

    @app.get("/v1/node/sample")
    async def sample() -> dict[str, Any]:
        """The node's latest sample and the agent's clock (UTC epoch seconds)."""
        latest = agent.latest
        return {"node": agent.node.name, "agent_wall_s": time.time(),
                "sample": None if latest is None else latest.to_dict()}

    @app.get("/v1/node/lines")
    async def lines(limit: int = Query(80, ge=1, le=1000)) -> dict[str, list[str]]:
        """Recent kernel lines and the rank's log lines."""
        return agent.lines(limit)

    @app.post("/v1/node/rank/start")
    async def start(order: StartIn) -> dict[str, Any]:
        """Start the node's headless rank for the head's run."""
        try:
            return await agent.start_rank(mode=order.mode, run_id=order.run_id,
                                          start_args=tuple(order.start_args))
        except KeyError:
            raise HTTPException(400, f"no mode {order.mode!r} in this node's policy") from None
        except EngineStartError as exc:
            code = 409 if agent.rank.alive else 500
            raise HTTPException(code, str(exc)) from None
        except OSError as exc:
            raise HTTPException(500, f"cannot prepare the rank: {exc}") from None

    @app.post("/v1/node/rank/stop")
    async def stop(order: StopIn) -> dict[str, Any]:
        """Stop the rank and say what is left."""
        return await agent.stop_rank(reason=order.reason, kill=order.kill)

    return app

"""Dependencies of the admin routes: the service's read model, the token check.

The routes see the running service only as an ``AdminBackend`` (the service's
``StatusView`` implements it), so ``show/`` never imports the service.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Annotated, Protocol

from fastapi import Depends, HTTPException, Request, status
from prometheus_client import CollectorRegistry

from supervisor.decide.ladder import LadderState
from supervisor.policy import Policy
from supervisor.record.store import Store
from supervisor.show.api.models import StatusOut
from supervisor.telemetry.sample import Sample

__all__ = ["AdminBackend", "ReadAccess", "SupervisorDep", "TokenAccess", "is_loopback"]


class AdminBackend(Protocol):
    """What the admin API reads and pulls of the running service."""

    @property
    def policy(self) -> Policy:
        """The policy in force."""

    @property
    def store(self) -> Store:
        """The service's store (blocking: call it from a thread)."""

    @property
    def registry(self) -> CollectorRegistry:
        """The supervisor's own metrics."""

    def samples(self) -> list[Sample]:
        """A copy of the live window, oldest first."""

    def status(self) -> StatusOut:
        """Where the ladder stands, what the engine does, the last decision."""

    def operate(self, action: str, mode: str | None = None) -> LadderState:
        """Pull an operator lever (KeyError: unknown mode; ValueError: not possible)."""


def get_supervisor(request: Request) -> AdminBackend:
    """The service's read model, put on the app's state when the app was built."""
    backend: AdminBackend = request.app.state.supervisor
    return backend


SupervisorDep = Annotated[AdminBackend, Depends(get_supervisor)]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (the bind address) only accepts local connections."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    return header[7:] if header.lower().startswith("bearer ") else None


def require_token(request: Request) -> None:
    """Actions: the bearer token must match. 401 without it, 503 when none is set up."""
    token = request.app.state.token
    if not token:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            "no admin token configured (admin.token_env or admin.token_file)")
    given = _bearer(request)
    if given is None or not hmac.compare_digest(given, token):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "a valid bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})


def require_read(request: Request) -> None:
    """Reads: open when the API listens on loopback only; otherwise the token as well."""
    if not request.app.state.reads_open:
        require_token(request)


TokenAccess = Depends(require_token)
ReadAccess = Depends(require_read)

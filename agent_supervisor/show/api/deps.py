"""Dependencies of the admin routes: the service's read model, the token check.

The routes see the running service only as an ``AdminBackend`` (the service's
``StatusView`` implements it), so ``show/`` never imports the service.
"""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path
from typing import Annotated, Protocol

from fastapi import Depends, HTTPException, Request, status
from prometheus_client import CollectorRegistry

from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.policy import Policy
from agent_supervisor.record.store import Store
from agent_supervisor.show.api.models import StatusOut
from agent_supervisor.telemetry.sample import Sample

__all__ = ["LOOPBACK_NAMES", "AdminBackend", "ReadAccess", "SupervisorDep", "TokenAccess",
           "allowed_host", "host_name", "is_loopback"]


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

    def engine_log(self) -> tuple[str, str, Path] | None:
        """(run id, mode, log file) of the current engine run; None before the first."""

    async def before_scrape(self) -> None:
        """Bring metrics kept elsewhere (the gateway process's) up to date."""


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


#: Host names the admin API always answers to (issue 17, DNS rebinding: a page on
#: evil.example whose name resolves to 127.0.0.1 must not read /api/incidents).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def host_name(header: str) -> str:
    """The name part of a ``Host`` header: ``[::1]:8081`` -> ``::1``, ``a.b:80`` -> ``a.b``
    (lower case, no trailing dot)."""
    h = header.strip().lower()
    if h.startswith("["):
        h = h[1:h.find("]")] if "]" in h else h[1:]
    elif h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def allowed_host(header: str | None, allowed: frozenset[str]) -> bool:
    """Whether a request's ``Host`` header names this API: a loopback name, or one in
    ``allowed`` (``admin.allowed_hosts``, the bind address). No header: refused."""
    return header is not None and host_name(header) in allowed


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
    # Bytes, not str: compare_digest raises TypeError on a non-ASCII str, and a
    # malformed header gave a 500 (issue 17).
    if given is None or not hmac.compare_digest(given.encode("utf-8", "surrogateescape"),
                                                token.encode("utf-8", "surrogateescape")):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "a valid bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})


def require_read(request: Request) -> None:
    """Reads: open when the API listens on loopback only; otherwise the token as well."""
    if not request.app.state.reads_open:
        require_token(request)


TokenAccess = Depends(require_token)
ReadAccess = Depends(require_read)

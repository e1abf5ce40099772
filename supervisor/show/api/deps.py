"""Dependencies of the admin routes: the live service, the store, the token check."""

from __future__ import annotations

import hmac
import ipaddress
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, HTTPException, Request, status

if TYPE_CHECKING:
    from supervisor.service import Supervisor

__all__ = ["ReadAccess", "SupervisorDep", "TokenAccess", "is_loopback"]


def get_supervisor(request: Request) -> Supervisor:
    """The one Supervisor, put on the app's state when the app was built."""
    return request.app.state.supervisor


SupervisorDep = Annotated["Supervisor", Depends(get_supervisor)]


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

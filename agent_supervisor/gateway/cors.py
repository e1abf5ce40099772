"""CORS for browser agents (issue 33): ``gateway.cors_allow_origins``.

Header names and rules are the Fetch standard's (fetch.spec.whatwg.org, "CORS protocol"):
a browser sends a *preflight* before a cross-origin request with an ``Authorization`` or
JSON ``Content-Type`` header: ``OPTIONS`` with ``Origin``,
``Access-Control-Request-Method`` and ``Access-Control-Request-Headers``, and no
credentials (so never the agent's key: answering it 401, as the gateway did, fails every
browser call). The gateway answers a preflight from an allowed origin itself, before the
key check and never forwarded:

- ``204`` with ``Access-Control-Allow-Origin: <the origin>`` (``*`` when the policy says
  ``*``), ``Access-Control-Allow-Methods: GET, POST``, ``Access-Control-Allow-Headers``
  echoing the requested ones (the SDKs send ``x-stainless-*``, ``anthropic-version``,
  ``openai-beta``, which no fixed list keeps up with), ``Access-Control-Max-Age`` and
  ``Vary: Origin``.

Every other answer to an allowed origin (proxied or the gateway's own error) gets
``Access-Control-Allow-Origin``, ``Vary: Origin`` and ``Access-Control-Expose-Headers``
naming the supervisor's headers and ``Retry-After``, so a browser agent reads them. A
request from an origin not listed gets no CORS header and is handled as any other (a
preflight then meets the key check and the path's methods, and the browser refuses).
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.responses import Response
from starlette.types import Message, Scope, Send

from agent_supervisor.gateway.visibility import HELD_SECONDS, MODE, RESUMED, RUNG

__all__ = ["PREFLIGHT_MAX_AGE_SECONDS", "Cors"]

#: Seconds a browser may reuse a preflight's answer (Chromium caps it at 7200, Firefox
#: at 86400); short, so a policy that drops an origin takes effect soon.
PREFLIGHT_MAX_AGE_SECONDS = 600
_EXPOSE = ", ".join([MODE, RUNG, HELD_SECONDS, RESUMED, "retry-after"]).encode()


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


class Cors:
    """The allow-list of one policy (empty: the gateway does no CORS)."""

    def __init__(self, origins: Iterable[str]) -> None:
        self.origins = frozenset(o.encode() for o in origins)
        self.any = b"*" in self.origins

    def allowed(self, scope: Scope) -> bytes | None:
        """The ``Access-Control-Allow-Origin`` value for this request, or None."""
        origin = _header(scope, b"origin")
        if origin is None or not (self.any or origin in self.origins):
            return None
        return b"*" if self.any else origin

    def preflight(self, scope: Scope, allow: bytes) -> Response | None:
        """The answer to a preflight from an allowed origin, or None (not a preflight)."""
        if scope["method"] != "OPTIONS":
            return None
        if _header(scope, b"access-control-request-method") is None:
            return None
        headers = {"Access-Control-Allow-Origin": allow.decode("latin-1"),
                   "Access-Control-Allow-Methods": "GET, POST",
                   "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_SECONDS),
                   "Vary": "Origin"}
        wanted = _header(scope, b"access-control-request-headers")
        if wanted:
            headers["Access-Control-Allow-Headers"] = wanted.decode("latin-1")
        return Response(status_code=204, headers=headers)

    @staticmethod
    def wrap(send: Send, allow: bytes) -> Send:
        """``send`` with the CORS headers of an actual response added."""
        async def cors_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [
                    *message.get("headers", []), (b"access-control-allow-origin", allow),
                    (b"access-control-expose-headers", _EXPOSE), (b"vary", b"Origin")]}
            await send(message)
        return cors_send

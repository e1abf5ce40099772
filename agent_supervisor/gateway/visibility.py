"""What the gateway tells agents about the supervisor (issue 31 item 2): which mode and
rung served an answer, whether it was held and for how long, whether it was carried
across an engine restart.

**Response headers**, on every answer the gateway proxies (and on its own 429 and 503
refusals, mode and rung only):

==============================  =============================================================
``X-Supervisor-Mode``           the mode serving it (``policies/*.yaml`` ``modes[].name``)
``X-Supervisor-Rung``           its rung on the ladder, 0 the fastest
``X-Supervisor-Held-Seconds``   seconds the gateway held the request before the engine took
                                it (queued for a slot, held during a switch, waiting for the
                                next engine before a re-send); ``0.000``: sent at once
``X-Supervisor-Resumed``        ``true``: the request was cut by an engine crash before any
                                byte came back and was re-sent whole to the next engine
``X-Supervisor-Served-By``      only on an answer a fallback upstream served while the local
                                engine was held (issue 31 item 5): the fallback's name
                                (``gateway.fallbacks[].name``, agent_supervisor/gateway/
                                failover.py); absent: the local engine served it
==============================  =============================================================

No shared convention names these: proxies in the field mark their answers with their
own prefix (LiteLLM's ``x-litellm-model-id``, ``x-litellm-response-duration-ms``:
docs.litellm.ai/docs/proxy/response_headers; ngrok's AI gateway ``Ngrok-AIG-Model``,
``Ngrok-AIG-Attempts``), so these take the supervisor's.

**A stream** has sent its headers before it can be cut, so a stream held across an
engine restart says so in SSE comments (lines starting with ``:``, which the OpenAI and
Anthropic SDKs' decoders and every SSE client skip: WHATWG HTML, server-sent events,
"If the line starts with a U+003A COLON character, ignore the line"):
``: supervisor held: engine restarting (mode M, rung R)`` when the cut is seen, the
keep-alive every ``KEEPALIVE_SECONDS`` while held, then ``: supervisor resumed: mode M,
rung R, held S s`` before the continuation's first event.

**``/v1/models``**: each model object gets ``"supervisor": {"mode", "rung", "held",
"shed"}`` (extra fields are kept by the SDKs' models), so an agent framework can log it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agent_supervisor.gateway.admission import Admission

__all__ = ["HELD_SECONDS", "MODE", "RESUMED", "RUNG", "SERVED_BY", "Serving", "answer_headers",
           "held_comment", "mode_headers", "resumed_comment", "supervisor_mark"]

MODE = "x-supervisor-mode"
RUNG = "x-supervisor-rung"
HELD_SECONDS = "x-supervisor-held-seconds"
RESUMED = "x-supervisor-resumed"
SERVED_BY = "x-supervisor-served-by"


class Serving(Protocol):
    """What these functions read of the gateway: the mode and rung it serves, and its
    admission (held, shed). The ``Gateway`` (agent_supervisor/gateway/server.py) and its
    ``GatewayView`` (view.py) satisfy it; it is its own here because cors.py, below
    the view, takes the header names from this module."""

    mode_name: str
    rung: int
    admission: Admission


def mode_headers(gw: Serving) -> dict[str, str]:
    """Mode and rung now (for the gateway's own refusals)."""
    return {MODE: gw.mode_name, RUNG: str(gw.rung)}


def answer_headers(gw: Serving, *, held_seconds: float,
                   resumed: bool) -> list[tuple[bytes, bytes]]:
    """The four headers of a proxied answer, as ASGI wants them (mode names are
    ``[a-z0-9._-]``: policy/model.py ``_NAME``, safe in a header)."""
    return [(MODE.encode(), gw.mode_name.encode()), (RUNG.encode(), b"%d" % gw.rung),
            (HELD_SECONDS.encode(), b"%.3f" % max(0.0, held_seconds)),
            (RESUMED.encode(), b"true" if resumed else b"false")]


def held_comment(gw: Serving) -> bytes:
    """The SSE comment written when a stream is cut and held for the next engine."""
    return (f": supervisor held: engine restarting (mode {gw.mode_name}, "
            f"rung {gw.rung})\n\n").encode()


def resumed_comment(gw: Serving, held_seconds: float) -> bytes:
    """The SSE comment written before a held stream's continuation."""
    return (f": supervisor resumed: mode {gw.mode_name}, rung {gw.rung}, "
            f"held {held_seconds:.1f} s\n\n").encode()


def supervisor_mark(gw: Serving) -> dict[str, Any]:
    """The ``"supervisor"`` field of each ``/v1/models`` entry: ``{"mode": str, "rung":
    int, "held": bool, "shed": bool}`` as the gateway sees them now."""
    a = gw.admission
    return {"mode": gw.mode_name, "rung": gw.rung, "held": a.held, "shed": a.shed}

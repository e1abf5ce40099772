"""Guard ``agent_errors``: parser errors at the gateway are not engine failures.

Tool-call and reasoning parser errors, ``content: null`` with ``finish_reason: stop``, a 5xx
on a few requests of a healthy engine (vllm #46464; a truncated tool call surfacing as
HTTP 500 in exo-explore/exo#2184; "Failed to parse tool call arguments as JSON" as a 500 in
vxcontrol/pentagi#313) are the model's output meeting a parser, not a dead or hung engine.
The gateway counts them per agent key (``gateway_parser_errors_total`` sums the keys); this
guard records them (info) with their rate, and never asks for a restart. Pure.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity

__all__ = ["GUARD", "check"]

GUARD = "agent_errors"
#: Parser errors are counted over this long.
SPAN_SECONDS = 600.0


def check(sit: Situation) -> list[Finding]:
    """An info finding while parser errors rose in the last ``SPAN_SECONDS``."""
    s = sit.latest
    if s is None:
        return []
    grown = sit.window.increase("gateway_parser_errors_total", sit.now_s - SPAN_SECONDS,
                                sit.now_s)
    if grown is None or grown[0] <= 0:
        return []
    return [Finding(GUARD, "agent_parser_errors", Severity.INFO,
                    f"{grown[0]:g} responses with parser errors in {grown[1]:.0f} s (tool-call "
                    "or reasoning parser, content null, a 5xx on one request): the engine "
                    "serves; recorded, never a restart",
                    {"parser_errors": grown[0], "seconds": round(grown[1], 1),
                     "requests_running": s.requests_running, "run_id": s.engine_run_id},
                    s.engine_run_id, Response.RECORD)]

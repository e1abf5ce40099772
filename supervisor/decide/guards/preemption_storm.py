"""Guard ``preemption_storm``: sustained preemptions, requests waiting, throughput falling.

vLLM preempts running sequences when the KV cache runs out (V1: recompute), so a storm
means too many sequences for the memory. High KV usage alone is normal: vLLM fills the
cache by design, so it is not a finding. All three must hold: the preemption rate over
``sustain_seconds`` at or above the threshold, requests waiting now, and generation
tokens/s over that period at least ``throughput_drop_ratio`` below the best of the
``LOOKBACK`` periods of the same length before it (a storm can outlast one period).
Shed first (fewer requests admitted by the gateway is fewer sequences at once, no
restart); if the storm outlasts ``hysteresis.shed_seconds`` once shed, step down to the
first rung with a lower ``--max-num-seqs``. Pure.
"""

from __future__ import annotations

from supervisor.decide.context import Situation
from supervisor.decide.findings import Finding, Response, Severity
from supervisor.states import EngineState

__all__ = ["GUARD", "check"]

GUARD = "preemption_storm"
LOOKBACK = 4


def check(sit: Situation) -> list[Finding]:
    """A warning (shed, then fewer sequences) during a preemption storm, else none."""
    cfg = sit.policy.guards.preemption_storm
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or not s.requests_waiting:
        return []
    w, now, span = sit.window, sit.now_s, cfg.sustain_seconds
    rate = w.rate("preemptions_total", span, now)
    if rate is None or rate < cfg.preemptions_per_second:
        return []
    during = w.rate("generation_tokens_total", span, now)
    earlier = [w.between(now - (k + 1) * span, now - k * span).rate(
        "generation_tokens_total", span, now - k * span) for k in range(1, 1 + LOOKBACK)]
    known = [r for r in earlier if r is not None]
    if during is None or not known:
        return []
    before = max(known)
    if before <= 0 or during > before * (1 - cfg.throughput_drop_ratio):
        return []
    evidence = {"preemptions_per_second": round(rate, 3),
                "threshold_per_second": cfg.preemptions_per_second,
                "generation_tokens_per_second": round(during, 1),
                "generation_tokens_per_second_before": round(before, 1),
                "throughput_drop_ratio": round(1 - during / before, 3),
                "requests_waiting": s.requests_waiting, "requests_running": s.requests_running,
                "kv_cache_usage_ratio": s.kv_cache_usage_ratio, "sustain_seconds": span,
                "run_id": s.engine_run_id}
    return [Finding(GUARD, "preemption_storm", Severity.WARNING,
                    f"preemption storm: {rate:.2f}/s with {s.requests_waiting:g} waiting, "
                    f"generation down {1 - during / before:.0%}", evidence, s.engine_run_id,
                    Response.SHED_FIRST_FEWER_SEQUENCES)]


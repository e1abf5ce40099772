"""Guard ``preemption_storm``: preemptions thrashing relative to the work done.

vLLM preempts running sequences when the KV cache runs out (V1: recompute), so a storm
means too many sequences for the memory. High KV usage alone is normal: vLLM fills the
cache by design, so it is not a finding. All of these must hold over the last
``sustain_seconds``:

- at least ``min_preemptions`` preemptions (never on the first ones), at or above
  ``preemptions_per_1k_tokens`` per 1,000 generated tokens (the recompute tax: vllm #54644
  measures 10-23% online under pressure, 32-79% in a thrash, 261-415 wasted tokens per
  preemption), and above ``preemptions_per_second`` if a policy still sets it;
- requests waiting on some sample: vLLM's ``num_requests_waiting`` gauge, or the
  gateway's queue (the gauge is set from the engine core's step reports and reads 0 at
  most scrapes on a busy CPU engine);
- generation tokens/s at least ``throughput_drop_ratio`` below the best of the
  ``LOOKBACK`` periods of the same length before it (a storm can outlast one period).

Shed first (fewer requests admitted by the gateway is fewer sequences at once, no
restart); if the storm outlasts ``hysteresis.shed_seconds`` once shed, step down to the
first rung with a lower ``--max-num-seqs``.

A storm that comes back after its shed was restored, within ``recur_seconds`` of that
shed, is ``preemption_storm_recurring``: the shed hid the storm without curing it (the
KV cache holds fewer sequences than the rung admits: Tandemn-Labs/tandemn-system#11, a
cache that fits ~70-80 of 256), and shedding again would restore and storm forever. It
steps down to fewer sequences at once (shedding instead only while the step is held).
Pure.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState

__all__ = ["GUARD", "check"]

GUARD = "preemption_storm"
LOOKBACK = 4


def check(sit: Situation) -> list[Finding]:
    """A warning (shed, then fewer sequences) during a preemption storm, else none."""
    cfg = sit.policy.guards.preemption_storm
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY:
        return []
    w, now, span = sit.window, sit.now_s, cfg.sustain_seconds
    preempted = w.increase("preemptions_total", now - span, now)
    if preempted is None or preempted[0] < cfg.min_preemptions \
            or preempted[1] < 0.8 * span:
        return []
    rate = preempted[0] / preempted[1]
    if cfg.preemptions_per_second is not None and rate < cfg.preemptions_per_second:
        return []
    span_samples = w.since(now - span)
    waiting = max((max(x.requests_waiting or 0, x.gateway_requests_queued or 0)
                   for x in span_samples), default=0)
    if not waiting:
        return []
    generated = w.increase("generation_tokens_total", now - span, now)
    if generated is None:
        return []
    per_1k = preempted[0] / max(generated[0] / 1000, 1e-9)
    if per_1k < cfg.preemptions_per_1k_tokens:
        return []
    during = generated[0] / generated[1]
    earlier = [w.between(now - (k + 1) * span, now - k * span).rate(
        "generation_tokens_total", span, now - k * span) for k in range(1, 1 + LOOKBACK)]
    known = [r for r in earlier if r is not None]
    if not known:
        return []
    before = max(known)
    if before <= 0 or during > before * (1 - cfg.throughput_drop_ratio):
        return []
    evidence = {"preemptions": preempted[0], "preemptions_per_second": round(rate, 3),
                "preemptions_per_1k_tokens": round(per_1k, 2),
                "threshold_per_1k_tokens": cfg.preemptions_per_1k_tokens,
                "generated_tokens": generated[0],
                "generation_tokens_per_second": round(during, 1),
                "generation_tokens_per_second_before": round(before, 1),
                "throughput_drop_ratio": round(1 - during / before, 3),
                "requests_waiting_max": waiting, "requests_waiting": s.requests_waiting,
                "gateway_requests_queued": s.gateway_requests_queued,
                "requests_running": s.requests_running,
                "kv_cache_usage_ratio": s.kv_cache_usage_ratio, "sustain_seconds": span,
                "run_id": s.engine_run_id}
    summary = (f"preemption storm: {per_1k:.1f} per 1,000 generated tokens "
               f"({preempted[0]:g} in {span:g} s) with up to {waiting:g} waiting, "
               f"generation down {1 - during / before:.0%}")
    last = sit.ladder.last_shed(GUARD)
    if not sit.ladder.shed and last is not None and now - last <= cfg.recur_seconds:
        evidence = {**evidence, "last_shed_seconds_ago": round(now - last, 1),
                    "recur_seconds": cfg.recur_seconds}
        return [Finding(GUARD, "preemption_storm_recurring", Severity.WARNING,
                        f"{summary}, back {now - last:.0f} s after the shed for the last "
                        f"one (within {cfg.recur_seconds:g} s): shedding did not cure it",
                        evidence, s.engine_run_id, Response.FEWER_SEQUENCES)]
    return [Finding(GUARD, "preemption_storm", Severity.WARNING, summary, evidence,
                    s.engine_run_id, Response.SHED_FIRST_FEWER_SEQUENCES)]

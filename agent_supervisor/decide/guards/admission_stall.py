"""Guard ``admission_stall``: requests wait, none finishes, the KV cache is far from full.

Tokens are not the only heartbeat: a scheduler that stops admitting requests can keep
prompt tokens advancing (it re-prefills what it holds) while nothing ever finishes, so no
counter the hang guard reads goes flat. vllm #53130 (vLLM on a 256-seat engine): once
running + deferred reached ``max_num_seqs`` the scheduler admitted nothing more; 4 running,
487 waiting (468 deferred), KV cache 20%, prompt throughput 1,946 tokens/s, generation
0.48 tokens/s, ``request_success_total`` +0 over the 60 s window, /health 200 for over
1.5 h until a restart. vllm-project/vllm-metal#479: 6 waiting ("capacity"), 0 running, KV
0.0% for an hour.

The verdict (critical, restart; repeated, the crash path steps down): over
``stall_seconds`` (plus the hang guard's allowance for the prompt tokens the gateway held
when the stall began: one chunked-prefill step of a huge prompt holds the token budget
and the queue behind it for minutes, eugr/spark-vllm-docker#409):
- requests finished (``Sample.requests_finished_total``: ``vllm:request_success_total``
  without aborts and errors) did not move;
- requests waited on every sample, and no fewer at the end than at the start;
- the KV cache read at or under ``kv_far_from_full_ratio`` on every sample (a queue in
  front of a full cache is KV pressure: preemption, the preemption guard's business);
- fewer requests ran than the rung's ``--max-num-seqs`` (a full batch of long
  generations keeps a queue waiting legitimately).
Unknown is not stalled: without the finished counter (llama-server exports none:
tests/fixtures/llamacpp/0.3.36/metrics.txt; the gateway counts no completions into the
Sample yet) or a KV reading there is no verdict. The evidence carries vLLM's waiting by
reason (``vllm:num_requests_waiting_by_reason``: ``capacity`` / ``deferred``, present in
vLLM 0.32.0's scrape, tests/fixtures/vllm/0.32.0/) and the token rates. A stall longer
than the decision window (``sampling.window_seconds``) is judged on the window. Pure.
"""

from __future__ import annotations

import math
from typing import Any

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample

__all__ = ["GUARD", "check"]

GUARD = "admission_stall"


def _known(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _stall(known: list[Sample]) -> list[Sample]:
    """The newest stretch of ``known`` with requests waiting and the finished count
    unchanged (the samples from the first that shows the count it still has)."""
    last = known[-1]
    start = len(known)
    for i in range(len(known) - 1, -1, -1):
        x = known[i]
        if x.requests_finished_total != last.requests_finished_total \
                or (x.requests_waiting or 0.0) < 1:
            break
        start = i
    return known[start:]


def _rate(span: list[Sample], name: str) -> float | None:
    """Growth per second of counter ``name`` over ``span`` (None when unknown)."""
    a: float | None = getattr(span[0], name)
    b: float | None = getattr(span[-1], name)
    dt = span[-1].t_s - span[0].t_s
    if a is None or b is None or not (_known(a) and _known(b)) or dt <= 0 or b < a:
        return None
    return round((b - a) / dt, 2)


def _evidence(sit: Situation, span: list[Sample], window: float, cap: int | None,
              prompt: int) -> dict[str, Any]:
    last = span[-1]
    return {
        "run_id": last.engine_run_id, "requests_waiting": last.requests_waiting,
        "requests_waiting_at_start": span[0].requests_waiting,
        "requests_waiting_capacity": last.requests_waiting_capacity,
        "requests_waiting_deferred": last.requests_waiting_deferred,
        "requests_running": last.requests_running, "max_num_seqs": cap,
        "requests_finished_total": last.requests_finished_total,
        "no_finish_seconds": round(last.t_s - span[0].t_s, 1),
        "stall_seconds": round(window, 1), "prompt_tokens_in_flight": prompt,
        "kv_cache_usage_ratio_max": max(x.kv_cache_usage_ratio or 0.0 for x in span),
        "kv_far_from_full_ratio": sit.policy.guards.admission_stall.kv_far_from_full_ratio,
        "prompt_tokens_per_second": _rate(span, "prompt_tokens_total"),
        "generation_tokens_per_second": _rate(span, "generation_tokens_total"),
        "gateway_requests_in_flight": last.gateway_requests_in_flight,
        "health_status": last.health_status,
    }


def check(sit: Situation) -> list[Finding]:
    """A critical finding (restart) when the engine has stopped admitting requests (see
    the module docstring); else none."""
    cfg = sit.policy.guards.admission_stall
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or s.engine_run_id is None \
            or s.engine_state_since_s is None or s.engine_run_id == sit.ladder.handled_run_id:
        return []
    smp = sit.policy.sampling
    if sit.now_s - s.t_s > smp.probe_timeout_seconds + smp.tick_seconds:
        return []                        # the newest reading is stale: unknown, not stalled
    known = [x for x in sit.run_samples() if x.t_s >= s.engine_state_since_s
             and _known(x.requests_finished_total) and _known(x.requests_waiting)]
    if not known or known[-1] is not s:
        return []
    span = _stall(known)
    if not span:
        return []
    first, last = span[0], span[-1]
    prompt = max([x.gateway_prompt_tokens_in_flight for x in span[:2]
                  if x.gateway_prompt_tokens_in_flight is not None], default=0)
    hung = sit.policy.guards.engine_hung
    window = cfg.stall_seconds + prompt / 1e6 * hung.stall_seconds_per_million_prompt_tokens
    flat = last.t_s - first.t_s
    if flat < window or sit.now_s - s.engine_state_since_s < cfg.ready_grace_seconds + window:
        return []
    if (last.requests_waiting or 0.0) < (first.requests_waiting or 0.0):
        return []                        # the queue drains: requests are being admitted
    kv = [x.kv_cache_usage_ratio for x in span]
    if not all(v is not None and _known(v) and v <= cfg.kv_far_from_full_ratio for v in kv):
        return []                        # full (or unknown): KV pressure is not this
    rung = s.engine_rung if s.engine_rung is not None else sit.ladder.rung
    cap = sit.policy.max_num_seqs(rung) if 0 <= rung < len(sit.policy.modes) else None
    running = [x.requests_running for x in span
               if x.requests_running is not None and _known(x.requests_running)]
    if cap is not None and running and max(running) >= cap:
        return []                        # a full batch: the queue waits for a seat
    evidence = _evidence(sit, span, window, cap, prompt)
    reasons = ""
    if _known(last.requests_waiting_capacity) or _known(last.requests_waiting_deferred):
        reasons = (f" ({last.requests_waiting_capacity or 0:g} for capacity, "
                   f"{last.requests_waiting_deferred or 0:g} deferred)")
    tokens = evidence["prompt_tokens_per_second"]
    summary = (f"engine not admitting: {last.requests_waiting:g} requests waiting{reasons}, "
               f"{last.requests_running or 0:g} running, none finished for {flat:.0f} s "
               f"with the KV cache at {evidence['kv_cache_usage_ratio_max']:.0%}"
               + (f" while prompt tokens advance {tokens:g}/s" if tokens else ""))
    return [Finding(GUARD, "engine_admission_stall", Severity.CRITICAL, summary, evidence,
                    s.engine_run_id, Response.RESTART)]

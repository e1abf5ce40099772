"""Guard ``engine_hung``: requests present, no progress, and a failed canary.

vLLM's /health answers 200 while the engine is hung (vllm PR #24897, issue #39863), so a
hang is read from progress: requests in flight (``load_of``) while the engine-step heartbeat
(``vllm:iteration_tokens_total_count``) and both token counters stay flat for the stall
window, confirmed by a canary request that failed after the stall began. No verdict
during start-up (or the grace after ready), while idle, or while any counter moves (a
long prefill under load advances them); a slow /health proves nothing.

The stall window:
- grows with the prompt tokens the gateway held in flight when the stall began
  (``stall_seconds_per_million_prompt_tokens``): one chunked-prefill step deep into a
  ~560K-token context ran for minutes on 2x GB10 (eugr/spark-vllm-docker#409). Requests
  that arrive later queue behind the step in progress and cannot lengthen it; counting
  them let a client that re-sends the prompt it waits for (each retry stacks in the
  gateway's count) push the verdict away for ever (issue 29);
- shrinks to ``power_hint_stall_seconds`` while the GPU reads busy at idle power with
  requests in flight (a wedged kernel spinning: ~95% util at 16-27 W against ~45 W
  healthy, eugr/spark-vllm-docker#260). The canary still decides.

An engine whose ``/metrics`` is served by its own loop (llama-server) stops answering it
when the loop stops, while ``/health`` still answers ok (llama.cpp #27388): a sample whose
loop probe went unanswered (``engine_loop_answered`` False) counts as no progress, its
counters as unchanged since the last answer. The canary still decides.

Requests stuck before the scheduler (the gateway holds them, the engine reports 0 running
and 0 waiting, no counter moves: vllm #51921 after client aborts) count as load through
``load_of`` and are a hang too; the evidence says where they are stuck.

While the stall is only suspected (flat past ``suspect_seconds`` plus the prompt
allowance, or past ``sampling.canary_after_seconds`` with the power hint; a canary on its
way), a warning asks to shed the gateway's limits; a
canary that answers restores them (``decide``). A hang with the structured-output (FSM) or
another speculative signature in this run's log, in a speculative mode, asks to skip
speculation at once; a hang with a huge prompt in flight asks for a rung with a context cap.
"""

from __future__ import annotations

from typing import Any

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.decide.guards.speculative import crash_signatures
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.load import load_of
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.stall import stall_of

__all__ = ["GUARD", "check"]

GUARD = "engine_hung"
def _stall_prompt(span: list[Sample]) -> int:
    """Prompt tokens the gateway held when the stall began: the most of the first two
    known readings of the stall (the sample that began it and the first that showed it
    flat), never the ones that came after (see the module doc; issue 29)."""
    read = [x.gateway_prompt_tokens_in_flight for x in span
            if x.gateway_prompt_tokens_in_flight is not None]
    return max(read[:2], default=0)


def _power_hint(sit: Situation, span: list[Sample]) -> bool:
    """Busy at idle power on every sample of the stall that has both readings."""
    cfg = sit.policy.guards.engine_hung
    read = [(x.t_s, x.gpu_utilization_ratio, x.gpu_power_w) for x in span
            if x.gpu_utilization_ratio is not None and x.gpu_power_w is not None]
    return bool(read) and read[-1][0] - read[0][0] >= cfg.power_hint_stall_seconds / 2 and all(
        util >= cfg.power_hint_utilization_ratio and watts <= cfg.power_hint_max_w
        for _, util, watts in read)


def _verdict(sit: Situation, last: Sample, flat: float, hint: bool, prompt: int, where: str,
             evidence: dict[str, Any]) -> Finding:
    """The hang, with the response its circumstances call for."""
    cfg, s = sit.policy.guards.engine_hung, sit.latest
    assert s is not None
    summary = (f"engine hung: {load_of(last):g} requests {where}, no engine step or token "
               f"for {flat:.0f} s, canary failed"
               + (f" (GPU busy at {last.gpu_power_w:g} W)" if hint else ""))
    response = Response.RESTART
    signatures = crash_signatures(sit) if sit.mode.speculative else []
    if signatures:
        evidence["speculative_signatures"] = signatures
        summary += f"; {', '.join(signatures)} in its logs with speculation on"
        response = Response.SKIP_SPECULATION
    elif prompt >= cfg.huge_prompt_tokens:
        summary += f" with {prompt} prompt tokens in flight"
        response = Response.CAP_CONTEXT
    return Finding(GUARD, "engine_hung", Severity.CRITICAL, summary, evidence,
                   s.engine_run_id, response)


def check(sit: Situation) -> list[Finding]:
    """A critical finding (restart, skip speculation or cap the context) when the engine is
    hung; a warning (shed) while it is only suspected; else none."""
    cfg = sit.policy.guards.engine_hung
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or s.engine_run_id is None:
        return []
    if s.engine_run_id == sit.ladder.handled_run_id:
        return []
    if s.engine_state_since_s is None:
        return []
    up = sit.now_s - s.engine_state_since_s
    if up < cfg.ready_grace_seconds + min(cfg.stall_seconds, cfg.power_hint_stall_seconds):
        return []
    smp = sit.policy.sampling
    # The stall rule the canary shares (telemetry/stall.py).
    got = stall_of(sit.run_samples(), sit.now_s, smp.probe_timeout_seconds + smp.tick_seconds)
    if got is None:
        return []
    since, flat, last = got.since_s, got.flat_seconds, got.last
    span = [x for x in got.known if x.t_s >= since]
    prompt = _stall_prompt(span)
    allowance = prompt / 1e6 * cfg.stall_seconds_per_million_prompt_tokens
    hint = _power_hint(sit, [x for x in span if x.t_s > since])
    window = cfg.power_hint_stall_seconds if hint else cfg.stall_seconds + allowance
    if up < cfg.ready_grace_seconds + window:
        return []
    stuck = all(x.requests_running == 0 and x.requests_waiting == 0
                and (x.gateway_requests_in_flight or 0) > 0 for x in span)
    evidence = {
        "run_id": s.engine_run_id, "requests_running": last.requests_running,
        "requests_waiting": last.requests_waiting, "prompt_tokens_in_flight": prompt,
        "gateway_requests_in_flight": last.gateway_requests_in_flight,
        "prompt_tokens_in_flight_now": last.gateway_prompt_tokens_in_flight,
        "flat_seconds": round(flat, 1), "stall_seconds": round(window, 1),
        "power_hint": hint, "gpu_power_w": last.gpu_power_w,
        "gpu_utilization_ratio": last.gpu_utilization_ratio,
        "stuck_before_scheduler": stuck,
        "iteration_tokens_count_total": last.iteration_tokens_count_total,
        "generation_tokens_total": last.generation_tokens_total,
        "canary_ok": s.canary_ok, "canary_latency_seconds": s.canary_latency_seconds,
        "health_status": s.health_status, "health_latency_seconds": s.health_latency_seconds,
        "engine_loop_answered": s.engine_loop_answered,
    }
    failed = s.canary_ok is False and s.canary_finished_s is not None \
        and s.canary_finished_s >= since
    where = "held by the gateway, none in the engine" if stuck else "in flight"
    if flat >= window and failed:
        return [_verdict(sit, last, flat, hint, prompt, where, evidence)]
    suspect_after = sit.policy.sampling.canary_after_seconds if hint \
        else cfg.suspect_seconds + allowance
    if flat >= suspect_after and s.canary_pending:
        return [Finding(GUARD, "engine_hang_suspected", Severity.WARNING,
                        f"engine may be hung: {load_of(last):g} requests {where}, no "
                        f"progress for {flat:.0f} s, canary on its way", evidence,
                        s.engine_run_id, Response.SHED)]
    return []

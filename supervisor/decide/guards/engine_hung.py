"""Guard ``engine_hung``: requests present, no progress, and a failed canary.

vLLM's /health answers 200 while the engine is hung (vllm PR #24897, issue #39863), so a
hang is read from progress: requests in flight (``load_of``) while the engine-step heartbeat
(``vllm:iteration_tokens_total_count``) and both token counters stay flat for the stall
window, confirmed by a canary request that failed after the stall began. No verdict
during start-up (or the grace after ready), while idle, or while any counter moves (a
long prefill under load advances them); a slow /health proves nothing.
"""

from __future__ import annotations

from supervisor.decide.context import Situation
from supervisor.decide.findings import Finding, Response, Severity
from supervisor.states import EngineState
from supervisor.telemetry.load import load_of

__all__ = ["GUARD", "check"]

GUARD = "engine_hung"
PROGRESS = ("iteration_tokens_count_total", "prompt_tokens_total", "generation_tokens_total")


def check(sit: Situation) -> list[Finding]:
    """One critical finding (response: restart) when the engine is hung, else none."""
    cfg = sit.policy.guards.engine_hung
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or s.engine_run_id is None:
        return []
    if s.engine_run_id == sit.ladder.handled_run_id:
        return []
    if s.engine_state_since_s is None or sit.now_s - s.engine_state_since_s < (
            cfg.ready_grace_seconds + cfg.stall_seconds):
        return []
    known = [x for x in sit.run_samples()
             if all(getattr(x, f) is not None for f in PROGRESS) and load_of(x) is not None]
    if not known:
        return []
    last = known[-1]
    # Since when nothing progressed (the streak of equal counters) ...
    flat_since = last.t_s
    for x in reversed(known):
        if any(getattr(x, f) != getattr(last, f) for f in PROGRESS):
            break
        flat_since = x.t_s
    # ... and since when requests have been in flight without a break. An idle spell
    # before the stall is fine (counters are flat then too); only the last stall window
    # must be loaded throughout.
    loaded_since = last.t_s
    for x in reversed(known):
        if not load_of(x):
            break
        loaded_since = x.t_s
    # Time without readings is unknown, not flat: the verdict rests on the newest
    # known sample, and only if it is fresh.
    smp = sit.policy.sampling
    if sit.now_s - last.t_s > smp.probe_timeout_seconds + smp.tick_seconds:
        return []
    stalled_since = max(flat_since, loaded_since)
    flat = last.t_s - stalled_since
    if flat < cfg.stall_seconds:
        return []
    if s.canary_ok is not False or s.canary_finished_s is None \
            or s.canary_finished_s < stalled_since:
        return []
    evidence = {
        "run_id": s.engine_run_id, "requests_running": last.requests_running,
        "requests_waiting": last.requests_waiting,
        "gateway_requests_in_flight": last.gateway_requests_in_flight,
        "flat_seconds": round(flat, 1),
        "stall_seconds": cfg.stall_seconds,
        "iteration_tokens_count_total": last.iteration_tokens_count_total,
        "generation_tokens_total": last.generation_tokens_total,
        "canary_ok": s.canary_ok, "canary_latency_seconds": s.canary_latency_seconds,
        "health_status": s.health_status, "health_latency_seconds": s.health_latency_seconds,
    }
    summary = (f"engine hung: {load_of(last):g} requests in flight, no engine step or token "
               f"for {flat:.0f} s, canary failed")
    return [Finding(GUARD, "engine_hung", Severity.CRITICAL, summary, evidence,
                    s.engine_run_id, Response.RESTART)]

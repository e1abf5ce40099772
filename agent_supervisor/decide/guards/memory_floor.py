"""Guard ``memory_floor``: unified memory at the floor. Emergency: kill the engine now.

MemAvailable (not NVML: GB10 reports device memory as Not Supported) under
``min_available_bytes`` on ``consecutive_samples`` samples in a row, or an
``NV_ERR_NO_MEMORY`` / ``_memdescAllocInternal`` line in the kernel log during this run
(the GB10 exhaustion signature that precedes host freezes: NVIDIA/open-gpu-kernel-modules
#1358). Applies during start-up too: on unified memory, start-up profiling can overshoot
``--gpu-memory-utilization``.

With no engine running (stopped), there is nothing to kill: MemAvailable under the floor
means something else holds the memory, and a start would only be killed again (the
restart loop of eugr/spark-vllm-docker#257: a restart policy relaunched into too little
memory ~35 times until the host thrashed). ``memory_floor_start_held`` (warning) then
holds the start until MemAvailable is back above the floor plus ``start_margin_bytes``
(hysteresis: once under, a reading just above the floor is not enough).
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState

__all__ = ["GUARD", "check"]

GUARD = "memory_floor"
GiB = 2**30


def _start_held(sit: Situation) -> list[Finding]:
    """While the engine is stopped: hold its start while MemAvailable is under the floor,
    or under the floor plus the margin after a reading under the floor since (and just
    before) the stop. Unknown stays unknown: no reading, no hold from this guard."""
    cfg, s = sit.policy.guards.memory_floor, sit.latest
    if s is None or s.mem_available_bytes is None:
        return []
    avail, floor = s.mem_available_bytes, cfg.min_available_bytes
    resume = floor + cfg.start_margin_bytes
    if avail >= resume:
        return []
    # The stopped stretch and the last reading before it (the one that had the engine
    # killed, when the floor did it).
    stretch: list[int] = []
    for x in reversed(list(sit.window)):
        if x.mem_available_bytes is not None:
            stretch.append(x.mem_available_bytes)
            if x.engine_state is not EngineState.STOPPED:
                break
    lowest = min(stretch)
    if avail >= floor and lowest >= floor:
        return []
    others = None
    if s.processes_rss_bytes is not None and s.processes_rss_before_launch_bytes is not None:
        others = s.processes_rss_bytes - s.processes_rss_before_launch_bytes
    grew = (f"; other processes grew by {others / GiB:.1f} GiB since the last launch"
            if others is not None and others > 0 else "")
    where = (f"under the floor of {floor / GiB:.2f} GiB" if avail < floor else
             f"back over the floor of {floor / GiB:.2f} GiB, not yet past its "
             f"{cfg.start_margin_bytes / GiB:.1f} GiB margin,")
    summary = (f"MemAvailable {avail / GiB:.2f} GiB {where} with no engine running: "
               f"something else holds the memory{grew}; the start waits until MemAvailable "
               f"is over {resume / GiB:.2f} GiB (a start now would be killed again)")
    evidence = {"mem_available_bytes": avail, "min_available_bytes": floor,
                "start_margin_bytes": cfg.start_margin_bytes, "resume_at_bytes": resume,
                "lowest_since_stop_bytes": lowest, "other_processes_grew_bytes": others,
                "engine_rss_bytes": s.engine_rss_bytes, "run_id": s.engine_run_id}
    return [Finding(GUARD, "memory_floor_start_held", Severity.WARNING, summary, evidence,
                    s.engine_run_id, Response.HOLD_START)]


def check(sit: Situation) -> list[Finding]:
    """One emergency finding (response: kill and step down) while an engine runs; while
    none runs, a warning holding its start (see the module docstring); else none."""
    cfg = sit.policy.guards.memory_floor
    s = sit.latest
    if s is not None and s.engine_state is EngineState.STOPPED:
        return _start_held(sit)
    if s is None or (s.engine_run_id is not None
                     and s.engine_run_id == sit.ladder.handled_run_id
                     and s.engine_state is not EngineState.STOPPED):
        return []
    running = s.engine_state in (EngineState.STARTING, EngineState.READY)
    known = [x.mem_available_bytes for x in sit.window if x.mem_available_bytes is not None]
    times = [x.t_s for x in sit.window if x.mem_available_bytes is not None]
    recent, recent_t = known[-cfg.consecutive_samples:], times[-cfg.consecutive_samples:]
    # "Consecutive" means spread over ticks: event ticks (a crash, ready) can come
    # milliseconds after a scheduled one, and two readings of one dip are one reading.
    spread = (recent_t[-1] - recent_t[0] if recent_t else 0.0) >= \
        0.5 * sit.policy.sampling.tick_seconds * (cfg.consecutive_samples - 1)
    if len(recent) == cfg.consecutive_samples and spread and all(
            x < cfg.min_available_bytes for x in recent):
        avail = recent[-1]
        evidence = {"mem_available_bytes": list(recent),
                    "min_available_bytes": cfg.min_available_bytes,
                    "consecutive_samples": cfg.consecutive_samples,
                    "engine_rss_bytes": s.engine_rss_bytes, "run_id": s.engine_run_id,
                    "engine_running": running}
        summary = (f"MemAvailable {avail / 2**30:.2f} GiB under the floor of "
                   f"{cfg.min_available_bytes / 2**30:.2f} GiB on {len(recent)} samples")
        return [Finding(GUARD, "memory_floor", Severity.EMERGENCY, summary, evidence,
                        s.engine_run_id, Response.KILL_STEP_DOWN)]
    if running:
        lines = [e for x in sit.run_samples() for e in (x.kernel_events or ())
                 if e == "nv_err_no_memory"]
        if lines:
            now_avail = s.mem_available_bytes
            evidence = {"kernel_events": len(lines), "mem_available_bytes": now_avail,
                        "min_available_bytes": cfg.min_available_bytes, "run_id": s.engine_run_id}
            # Healthy starts print it too (vllm #56824): an emergency only with memory
            # actually low (under twice the floor) or unknown; otherwise on record.
            if now_avail is None or now_avail < 2 * cfg.min_available_bytes:
                return [Finding(GUARD, "nv_err_no_memory", Severity.EMERGENCY,
                                "NV_ERR_NO_MEMORY in the kernel log with MemAvailable low: "
                                "unified memory exhausted", evidence, s.engine_run_id,
                                Response.KILL_STEP_DOWN)]
            return [Finding(GUARD, "nv_err_no_memory", Severity.INFO,
                            f"NV_ERR_NO_MEMORY in the kernel log, MemAvailable still "
                            f"{now_avail / 2**30:.1f} GiB: recorded", evidence, s.engine_run_id,
                            Response.RECORD)]
    return []

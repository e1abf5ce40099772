"""Guard ``memory_floor``: unified memory at the floor. Emergency: kill the engine now.

MemAvailable (not NVML: GB10 reports device memory as Not Supported) under
``min_available_bytes`` on ``consecutive_samples`` samples in a row, or an
``NV_ERR_NO_MEMORY`` / ``_memdescAllocInternal`` line in the kernel log during this run
(the GB10 exhaustion signature that precedes host freezes: NVIDIA/open-gpu-kernel-modules
#1358). Applies during start-up too: on unified memory, start-up profiling can overshoot
``--gpu-memory-utilization``.
"""

from __future__ import annotations

from supervisor.decide.context import Situation
from supervisor.decide.findings import Finding, Response, Severity
from supervisor.states import EngineState

__all__ = ["GUARD", "check"]

GUARD = "memory_floor"


def check(sit: Situation) -> list[Finding]:
    """One emergency finding (response: kill and step down), else none."""
    cfg = sit.policy.guards.memory_floor
    s = sit.latest
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

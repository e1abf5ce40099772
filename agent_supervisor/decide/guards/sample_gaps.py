"""Guard ``sample_gaps``: gaps in the supervisor's own samples.

A gap (two consecutive samples further apart than ``record_seconds``) means the host froze
or the supervisor was not scheduled: the CPU engine starved it for 1-13 s here
(shared/CPU_ENGINE.md); a GB10 host froze for 627 s with 124,258 of 124,546 MiB used
(AEON-7/vllm-ultimate-dgx-spark#9). It is a fact about the box, recorded (info), never a
verdict on the engine. A gap of minutes (``starved_seconds``) while the engine served
(ready, the same run, on both sides of it) is a warning on record (``sample_gap_starved``):
the box starved the supervisor, whose guards saw nothing meanwhile (issue 29; it was an
info line); no action follows from it. After a long gap (``long_gap_seconds``) with
MemAvailable still near full (``near_full_available_bytes``, default twice the emergency
floor), the engine steps down: the box may have frozen on memory and will again. The gap
is judged until ``long_gap_seconds`` after it ended, so a step held back by a cooldown is
not lost. Pure.
"""

from __future__ import annotations

from itertools import pairwise

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample

__all__ = ["GUARD", "check"]

GUARD = "sample_gaps"


def _served(samples: list[Sample], ended: float) -> bool:
    """Whether the engine served on both sides of the gap that ended at ``ended``: the
    samples just before and at its end both ready, of the same run."""
    after = next((i for i, x in enumerate(samples) if x.t_s == ended), None)
    if not after:
        return False
    a, b = samples[after - 1], samples[after]
    return a.engine_state is b.engine_state is EngineState.READY \
        and a.engine_run_id is not None and a.engine_run_id == b.engine_run_id


def check(sit: Situation) -> list[Finding]:
    """A warning (step down) after a long gap with memory near full; a warning on record
    for a gap of minutes while the engine served; info for a gap."""
    cfg = sit.policy.guards.sample_gaps
    samples = list(sit.window)
    s = sit.latest
    if s is None or len(samples) < 2:
        return []
    gaps = [(b.t_s, b.t_s - a.t_s) for a, b in pairwise(samples)
            if b.t_s - a.t_s >= cfg.record_seconds and sit.now_s - b.t_s <= cfg.long_gap_seconds]
    if not gaps:
        return []
    ended, gap = max(gaps, key=lambda g: g[1])
    floor = sit.policy.guards.memory_floor.min_available_bytes
    near = cfg.near_full_available_bytes if cfg.near_full_available_bytes is not None \
        else 2 * floor
    evidence = {"gap_seconds": round(gap, 1), "ended_s": ended,
                "tick_lateness_seconds": s.tick_lateness_seconds,
                "mem_available_bytes": s.mem_available_bytes,
                "near_full_available_bytes": near, "long_gap_seconds": cfg.long_gap_seconds,
                "run_id": s.engine_run_id}
    if gap >= cfg.long_gap_seconds and s.engine_state is EngineState.READY \
            and s.mem_available_bytes is not None and s.mem_available_bytes < near:
        return [Finding(GUARD, "sample_gap_memory", Severity.WARNING,
                        f"no sample for {gap:.0f} s (the host froze or the supervisor was not "
                        f"scheduled) and MemAvailable {s.mem_available_bytes / 2**30:.1f} GiB "
                        "after it: near full", evidence, s.engine_run_id, Response.STEP_DOWN)]
    if gap >= cfg.starved_seconds and _served(samples, ended):
        return [Finding(GUARD, "sample_gap_starved", Severity.WARNING,
                        f"no sample for {gap:.0f} s while the engine served: the box starved "
                        "the supervisor (nothing was judged meanwhile; give it its own CPU "
                        "and priority)", {**evidence, "starved_seconds": cfg.starved_seconds},
                        s.engine_run_id, Response.RECORD)]
    return [Finding(GUARD, "sample_gap", Severity.INFO,
                    f"no sample for {gap:.0f} s: the host froze or the supervisor was not "
                    "scheduled (a fact about the box)", evidence, s.engine_run_id,
                    Response.RECORD)]

"""Guard ``spec_drift``: speculative acceptance drifting down over hours under steady traffic.

sglang #37326 (NEXTN/MTP, hybrid GDN model on 2 nodes): draft acceptance healthy at boot
decays to ~0 over ~24 h of uptime with no error; throughput falls ~2.9x; the operators
restart when the logged accept rate falls below 0.35 ("restores 16.4 -> 47.1 tok/s").

The comparison is per position (DESIGN.md: never across different k), position 0 deciding:
acceptance over the last ``drift_recent_seconds`` against the run's own history before
that period. vLLM's counters (``vllm:spec_decode_num_drafts_total``,
``vllm:spec_decode_num_accepted_tokens_per_pos_total``) count from the engine's start, so
their values at the start of the recent period are the run's whole history, its first
hour included, though the decision window keeps only minutes; the run must have served
``drift_history_seconds`` before the recent period. A slow decay lowers the history too,
so the ratio understates it (conservative). A change of traffic lowers acceptance as well
(long contexts: vllm #47602, position 1 93.5% -> 72.1%), mostly at the deeper positions:
position 0 under ``drift_ratio`` x its history is the threshold.

A warning on record (no ladder walk: no rung fixes it, and the record names it). A run on
a new engine version against the last good run of the previous one is the
``engine_update`` guard's (``engine_update_regression``). Pure.
"""

from __future__ import annotations

import math

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.decide.guards.speculative import DRAFTS, PER_POSITION, run_acceptance
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

__all__ = ["GUARD", "check"]

GUARD = "spec_drift"


def _history(x: Sample) -> tuple[float, list[float]] | None:
    """(drafts, acceptance per position) since the engine started, from the cumulative
    counters of sample ``x``, or None when unknown or too few."""
    drafts, accepted = getattr(x, DRAFTS), getattr(x, PER_POSITION)
    if drafts is None or accepted is None or not math.isfinite(drafts) or drafts <= 0:
        return None
    return drafts, [a / drafts for a in accepted]


def check(sit: Situation) -> list[Finding]:
    """A warning on record when position-0 acceptance fell under ``drift_ratio`` x the
    run's history (see the module docstring); else none."""
    cfg = sit.policy.guards.speculative
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or not sit.mode.speculative \
            or s.engine_state_since_s is None:
        return []
    start = sit.now_s - cfg.drift_recent_seconds
    if start - s.engine_state_since_s < cfg.drift_history_seconds:
        return []
    run = Window.of([x for x in sit.run_samples() if x.t_s >= start])
    first = next(iter(run), None)
    if first is None or first.t_s > start + 0.1 * cfg.drift_recent_seconds:
        return []                            # the window does not reach back far enough
    history, recent = _history(first), run_acceptance(run, first.t_s, sit.now_s)
    if history is None or recent is None or history[0] < cfg.drift_min_drafts \
            or recent[0] < cfg.min_drafts or len(history[1]) != len(recent[1]):
        return []
    (h_drafts, past), (r_drafts, now) = history, recent
    if not past or past[0] <= 0 or not now[0] < cfg.drift_ratio * past[0]:
        return []
    evidence = {"acceptance_by_position": [round(a, 4) for a in now],
                "history_acceptance_by_position": [round(a, 4) for a in past],
                "drafts": r_drafts, "history_drafts": h_drafts,
                "recent_seconds": cfg.drift_recent_seconds,
                "uptime_seconds": round(sit.now_s - s.engine_state_since_s),
                "drift_ratio": cfg.drift_ratio, "ratio": round(now[0] / past[0], 3),
                "mode": sit.mode.name, "run_id": s.engine_run_id}
    return [Finding(GUARD, "spec_acceptance_drift", Severity.WARNING,
                    f"speculative acceptance at position 0 {now[0]:.2f} over the last "
                    f"{cfg.drift_recent_seconds:g} s against {past[0]:.2f} over this run's "
                    f"{(start - s.engine_state_since_s) / 3600:.1f} h before it ({sit.mode.name}):"
                    " drifting down under steady traffic; in the field only a restart reset "
                    "it (sglang #37326); on record, no step", evidence, s.engine_run_id,
                    Response.RECORD)]

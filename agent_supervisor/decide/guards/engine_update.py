"""Guard ``engine_update``: a run on a new engine version slower than the old version's.

An engine or image update can lower acceptance or tokens/s with no error at all: vllm
#31030 (Qwen3 235B FP8, the same arguments: ~60 tok/s on 0.10.2, 28 tok/s on 0.12.0, the
operators reverted); vllm-project/vllm-ascend#6606 ("the speculative inference
acceptance rate decreases after the vllm version is upgraded to v0.15.0"); vllm #33497
(deepseek_mtp acceptance low on the v0.15.0 image). Nothing restarts it away and no rung
fixes a build, so it must be named as what it is: an update regression, a warning on
record with both versions and both figures (the operator pins the old image or waits for
a fix), no ladder walk and no restart.

The comparison (``Situation.update``, built by the runtime when the run serves: the last
good run of the same mode and arguments on another engine version or image,
``runtime/engine_updates.py``):

- acceptance at draft position 0 over the whole run (vLLM's per-position counters count
  from the engine's start) against the old run's, both of the same k (DESIGN.md: never
  across different k), once the run has ``min_drafts`` drafts;
- generation tokens/s per running request while requests ran (a sample pair counts when
  both samples had requests running; idle spells are left out) against the old run's,
  once the window holds ``min_busy_seconds`` of it and only when the mean of requests
  running is within ``concurrency_tolerance`` of the old run's (batch size moves the
  per-request rate).

Either under ``guards.engine_update.ratio`` x the old figure is the finding. A change of
traffic on the same version is not an update: the runtime hands no comparison then (and
this guard ignores one whose versions are equal). Pure.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.decide.guards.speculative import DRAFTS, PER_POSITION
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample

__all__ = ["GUARD", "busy_rate", "check", "run_acceptance_total"]

GUARD = "engine_update"


def busy_rate(samples: Sequence[Sample]) -> tuple[float, float, float] | None:
    """(generation tokens/s per running request, mean requests running, busy seconds)
    over the pairs of consecutive samples of ``samples`` (one run, oldest first) that both
    had requests running and a known ``generation_tokens_total``; None without any.
    A counter that went back (a reset) leaves its pair out."""
    tokens = seconds = weighted = 0.0
    for a, b in itertools.pairwise(samples):
        ra, rb = a.requests_running, b.requests_running
        ga, gb = a.generation_tokens_total, b.generation_tokens_total
        dt = b.t_s - a.t_s
        if not ra or not rb or ga is None or gb is None or gb < ga or dt <= 0:
            continue
        running = (ra + rb) / 2
        tokens += (gb - ga) / running
        seconds += dt
        weighted += running * dt
    if seconds <= 0:
        return None
    return tokens / seconds, weighted / seconds, seconds


def run_acceptance_total(x: Sample) -> tuple[float, list[float]] | None:
    """(drafts, acceptance per position) since the engine started, from the cumulative
    counters of sample ``x``; None when unknown."""
    drafts, accepted = getattr(x, DRAFTS), getattr(x, PER_POSITION)
    if drafts is None or accepted is None or not math.isfinite(drafts) or drafts <= 0:
        return None
    return drafts, [a / drafts for a in accepted]


def check(sit: Situation) -> list[Finding]:
    """A warning on record when this run, on a new engine version, falls under
    ``guards.engine_update.ratio`` x the last good run of the previous version (see the
    module docstring); else none."""
    cfg, up, s = sit.policy.guards.engine_update, sit.update, sit.latest
    if not cfg.enabled or up is None or s is None or s.engine_state is not EngineState.READY \
            or s.engine_run_id != up.run_id or up.mode != sit.mode.name \
            or up.version == up.previous.version:
        return []
    old = up.previous
    dropped: list[str] = []
    evidence: dict[str, object] = {
        "mode": up.mode, "version": up.version, "previous_version": old.version,
        "previous_measured_at": old.measured_at, "ratio_threshold": cfg.ratio}
    got = run_acceptance_total(s)
    if got is not None and old.acceptance_by_position and got[0] >= cfg.min_drafts \
            and len(got[1]) == len(old.acceptance_by_position) \
            and old.acceptance_by_position[0] > 0:
        now0, was0 = got[1][0], old.acceptance_by_position[0]
        evidence.update(acceptance_by_position=[round(a, 4) for a in got[1]],
                        previous_acceptance_by_position=list(old.acceptance_by_position),
                        drafts=got[0])
        if now0 < cfg.ratio * was0:
            dropped.append(f"acceptance at position 0 {now0:.2f} against {was0:.2f}")
    rate = busy_rate(sit.run_samples())
    was = old.tokens_per_second_per_request
    if rate is not None and was and rate[2] >= cfg.min_busy_seconds \
            and abs(rate[1] - old.concurrency) <= cfg.concurrency_tolerance \
            * max(old.concurrency, 1.0):
        evidence.update(tokens_per_second_per_request=round(rate[0], 2),
                        previous_tokens_per_second_per_request=round(was, 2),
                        requests_running_mean=round(rate[1], 2),
                        previous_requests_running_mean=round(old.concurrency, 2),
                        busy_seconds=round(rate[2]))
        if rate[0] < cfg.ratio * was:
            dropped.append(f"{rate[0]:.1f} tokens/s per request against {was:.1f} at "
                           f"~{old.concurrency:.1f} running")
    if not dropped:
        return []
    return [Finding(GUARD, "engine_update_regression", Severity.WARNING,
                    f"{up.mode} on engine {up.version}: " + "; ".join(dropped)
                    + f" on {old.version} (the last good run, {old.measured_at[:19]}): "
                    f"under {cfg.ratio:g}x after the update, an update regression; on "
                    "record, no step and no restart (pin the previous version or image)",
                    evidence, s.engine_run_id, Response.RECORD)]

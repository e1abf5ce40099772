"""Guard ``speculative``: speculative decoding that is about to fail or does not pay.

- Crash signatures (``crash_signatures``, used by ``engine_dead``): CUDA illegal memory
  access, device-side assert in the engine's log, or Xid 31 (MMU fault) from the kernel,
  in a run with speculation on. Speculative decoding can crash after hours that way
  (DESIGN.md); the response is the first rung without speculation, not lower memory.
- Acceptance jump: position-0 acceptance over the last ``acceptance_recent_seconds`` at
  ~100% against a clearly lower median of the run's history: a known precursor,
  recorded as a warning (no action of its own). Acceptance is compared per position
  and only within one run (one k), never across different k: a k=8 run's overall 0.44
  is not "low" next to a k=2 run.
- No gain: per-request decode speed (1 / mean time per output token of the requests that
  finished in the period, ``vllm:request_time_per_output_token_seconds``) below
  ``slower_ratio`` x the calibrated baseline of the first rung without speculation at the
  nearest concurrency (mean of the running-requests gauge):
  step to that rung at the next calm moment (speculation can be slower than plain
  decoding at high concurrency, and an untrained MTP layer always is).
Pure.
"""

from __future__ import annotations

import statistics

from supervisor.decide.context import Situation
from supervisor.decide.findings import Finding, Response, Severity
from supervisor.states import EngineState
from supervisor.telemetry.window import Window

__all__ = ["GUARD", "check", "crash_signatures"]

GUARD = "speculative"
PER_POSITION = "spec_decode_accepted_per_position_total"
DRAFTS = "spec_decode_num_drafts_total"
#: Requests that must finish within the period before its decode speed is judged.
MIN_FINISHED = 4


def crash_signatures(sit: Situation) -> list[str]:
    """Speculation-related crash signatures seen during the newest sample's run."""
    cfg = sit.policy.guards.speculative
    found: list[str] = []
    for x in sit.run_samples():
        found += [t for t in x.engine_log_tags if t in cfg.crash_tags]
        for event in x.kernel_events or ():
            code = event.removeprefix("xid:")
            if event.startswith("xid:") and code.isdigit() and int(code) in cfg.crash_xids:
                found.append(event)
    return list(dict.fromkeys(found))


def check(sit: Situation) -> list[Finding]:
    """Findings about the current speculative mode (none in a mode without speculation)."""
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or not sit.mode.speculative:
        return []
    return [*_acceptance_jump(sit), *_slower_than_plain(sit)]


def _position0(window: Window, start_s: float, end_s: float, min_drafts: int) -> float | None:
    part = window.between(start_s, end_s)
    drafts = part.increase(DRAFTS, start_s)
    accepted = part.increase_by_position(PER_POSITION, start_s)
    if drafts is None or accepted is None or drafts[0] < min_drafts:
        return None
    return accepted[0] / drafts[0]


def _acceptance_jump(sit: Situation) -> list[Finding]:
    cfg = sit.policy.guards.speculative
    run = Window.of(sit.run_samples())
    now, step = sit.now_s, cfg.acceptance_recent_seconds
    recent = _position0(run, now - step, now, cfg.min_drafts)
    if recent is None or recent < cfg.acceptance_jump_ratio:
        return []
    history = []
    for k in range(1, int(cfg.acceptance_history_seconds / step) + 1):
        value = _position0(run, now - (k + 1) * step, now - k * step, cfg.min_drafts)
        if value is not None:
            history.append(value)
    if len(history) < 3:
        return []
    median = statistics.median(history)
    if median >= cfg.acceptance_jump_ratio - 0.1:
        return []
    s = sit.latest
    return [Finding(GUARD, "spec_acceptance_jump", Severity.WARNING,
                    f"position-0 acceptance jumped to {recent:.0%} against a median of "
                    f"{median:.0%}: a known precursor of speculative-decoding crashes",
                    {"position0_acceptance": round(recent, 4),
                     "position0_median": round(median, 4), "history_slices": len(history),
                     "slice_seconds": step, "mode": sit.mode.name},
                    s.engine_run_id if s else None, Response.RECORD)]


def _slower_than_plain(sit: Situation) -> list[Finding]:
    cfg = sit.policy.guards.speculative
    plain = sit.policy.first_plain_rung_below(sit.ladder.rung)
    if plain is None:
        return []
    plain_mode = sit.policy.modes[plain].name
    baseline = sorted(sit.baselines.get(plain_mode, ()))
    s = sit.latest
    if not baseline or s is None or s.engine_state_since_s is None:
        return []
    now, span = sit.now_s, cfg.slower_sustain_seconds
    if now - s.engine_state_since_s < span:
        return []
    samples = [x for x in sit.run_samples() if x.t_s >= now - span]
    if not samples or samples[0].t_s > now - 0.9 * span:
        return []
    part = Window.of(samples)
    tpot_sum = part.increase("request_tpot_sum_seconds_total", now - span)
    finished = part.increase("request_tpot_count_total", now - span)
    if tpot_sum is None or finished is None or finished[0] < MIN_FINISHED or tpot_sum[0] <= 0:
        return []                           # not enough requests finished to judge
    per_request = finished[0] / tpot_sum[0]
    running = [x.requests_running for x in samples if x.requests_running is not None]
    mean_running = statistics.fmean(running) if running else 1.0
    conc, base = min(baseline, key=lambda b: abs(b[0] - mean_running))
    if per_request >= cfg.slower_ratio * base:
        return []
    return [Finding(GUARD, "spec_slower_than_plain", Severity.WARNING,
                    f"{sit.mode.name} decodes {per_request:.0f} tokens/s per request "
                    f"(~{mean_running:.1f} running); {plain_mode} was calibrated at "
                    f"{base:.0f} at {conc:g}: speculation does not pay",
                    {"mode": sit.mode.name,
                     "tokens_per_second_per_request": round(per_request, 1),
                     "requests_finished": finished[0],
                     "requests_running_mean": round(mean_running, 2),
                     "baseline_mode": plain_mode, "baseline_concurrency": conc,
                     "baseline_tokens_per_second_per_request": base,
                     "ratio": round(per_request / base, 3), "slower_ratio": cfg.slower_ratio,
                     "sustain_seconds": span}, s.engine_run_id,
                    Response.SKIP_SPECULATION_WHEN_CALM)]

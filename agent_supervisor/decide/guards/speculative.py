"""Guard ``speculative``: speculative decoding that is about to fail or does not pay.

- Crash signatures (``crash_signatures``, used by ``engine_dead``): CUDA illegal memory
  access, device-side assert in the engine's log, or Xid 31 (MMU fault) from the kernel,
  in a run with speculation on. Speculative decoding can crash after hours that way
  (DESIGN.md); the response is the first rung without speculation, not lower memory.
- Launch lottery: the first ``lottery_drafts`` drafts after ready accept far worse at
  position 0 than this mode usually does (``Situation.acceptance``: calibration and past
  good runs): one restart of the same rung; a second low launch is ``spec_degraded``, a
  warning on record, and no more restarts.
- Acceptance anomaly: every draft position accepted (~100%, mean acceptance length k + 1)
  over the last ``acceptance_recent_drafts`` drafts (N drafts, not a time slice that
  dilutes the jump) against a clearly lower history of the same run, with several
  requests running (one stream repeating text reaches 100% legitimately): the precursor
  of the MTP illegal-memory-access crash (vllm #40756). A warning on record, alerted.
  Acceptance is compared per position and only within one run (one k), never across
  different k.
- Structured output: xgrammar's "Failed to advance FSM" lines while requests are still
  served (vllm #53777, #53181: HTTP 200): a warning on record; in a crash or a hang the
  same tag is a crash signature (``crash_tags``) and skips speculation (vllm #51660).
- Prefix caching defeated: prompt tokens the gateway saw repeated, yet the prefix cache
  hits ~0 of them, with speculation on (vllm #54360: hybrid GDN models with MTP or DFlash
  re-prefill an identical 18,219-token prompt): a warning on record with the hit ratio.
- No gain: per-request decode speed (1 / mean time per output token of the requests that
  finished in the period, ``vllm:request_time_per_output_token_seconds``; without that
  histogram, generation tokens/s per running request, vllm #19254) below
  ``slower_ratio`` x the calibrated baseline of the first rung without speculation at the
  nearest concurrency (mean of the running-requests gauge):
  step to that rung at the next calm moment (speculation can be slower than plain
  decoding at high concurrency, and an untrained MTP layer always is).
Pure.
"""

from __future__ import annotations

import statistics

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.rates import since_last
from agent_supervisor.telemetry.window import Window

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
    return [*_launch_lottery(sit), *_acceptance_anomaly(sit), *_structured_output(sit),
            *_prefix_defeated(sit), *_slower_than_plain(sit)]


def _prefix_defeated(sit: Situation) -> list[Finding]:
    """Repeated prefixes (the gateway saw them) that the prefix cache never hits, with
    speculation on: a warning on record with the hit ratio (vllm #54360)."""
    cfg = sit.policy.guards.speculative
    args = [*sit.policy.engine.args, *sit.mode.args]
    if "--no-enable-prefix-caching" in args:
        return []
    now, span = sit.now_s, cfg.prefix_window_seconds
    run = Window.of(sit.run_samples())
    queries = run.increase("prefix_cache_queries_total", now - span, now)
    hits = run.increase("prefix_cache_hits_total", now - span, now)
    repeats = run.increase("gateway_repeated_prefix_tokens_total", now - span, now)
    if queries is None or hits is None or repeats is None \
            or queries[0] < cfg.prefix_min_query_tokens or queries[1] < 0.8 * span:
        return []
    ratio, repeated = hits[0] / queries[0], repeats[0] / queries[0]
    if ratio > cfg.prefix_max_hit_ratio or repeated < cfg.prefix_min_repeat_ratio:
        return []
    s = sit.latest
    return [Finding(GUARD, "spec_prefix_cache_defeated", Severity.WARNING,
                    f"prefix cache hit ratio {ratio:.1%} while {repeated:.0%} of the prompt "
                    f"tokens repeat earlier prompts, with speculation on ({sit.mode.name}): "
                    "every turn pays its whole prefill again (vllm #54360)",
                    {"hit_ratio": round(ratio, 4), "repeated_ratio": round(repeated, 3),
                     "query_tokens": queries[0], "seconds": round(queries[1], 1),
                     "mode": sit.mode.name}, s.engine_run_id if s else None, Response.RECORD)]


def _first_drafts(run: Window, n: float) -> tuple[float, list[float]] | None:
    """(drafts, acceptance by position) over the first ``n`` drafts of ``run``."""
    first = next(iter(run), None)
    if first is None:
        return None
    for x in run:
        got = run.increase(DRAFTS, first.t_s, x.t_s)
        if got is not None and got[0] >= n:
            return _acceptance(run, first.t_s, x.t_s)
    return None


def _launch_lottery(sit: Situation) -> list[Finding]:
    """The first ``lottery_drafts`` drafts after ready against the mode's usual acceptance
    by position: far lower at position 0 is a bad launch (restart once; then
    ``spec_degraded``)."""
    cfg = sit.policy.guards.speculative
    usual = sit.acceptance.get(sit.mode.name)
    s = sit.latest
    if not usual or s is None or s.engine_state_since_s is None \
            or s.engine_run_id == sit.ladder.handled_run_id:
        return []
    run = Window.of([x for x in sit.run_samples() if x.t_s >= s.engine_state_since_s])
    got = _first_drafts(run, cfg.lottery_drafts)
    if got is None or len(got[1]) != len(usual) or usual[0] <= 0:
        return []
    drafts, by_pos = got
    if by_pos[0] >= cfg.lottery_ratio * usual[0]:
        return []
    evidence = {"acceptance_by_position": [round(a, 4) for a in by_pos],
                "usual_acceptance_by_position": list(usual), "drafts": drafts,
                "lottery_ratio": cfg.lottery_ratio, "mode": sit.mode.name,
                "restarts_for_this": sit.ladder.lottery_restarts, "run_id": s.engine_run_id}
    head = (f"the first {drafts:.0f} drafts of this launch accept {by_pos[0]:.2f} at position "
            f"0 against a usual {usual[0]:.2f} for {sit.mode.name}")
    if sit.ladder.lottery_restarts >= cfg.lottery_restarts:
        return [Finding(GUARD, "spec_degraded", Severity.WARNING,
                        f"{head}, again after {sit.ladder.lottery_restarts} restart(s): "
                        "speculation degraded on this box (no more restarts)", evidence,
                        s.engine_run_id, Response.RECORD)]
    return [Finding(GUARD, "spec_launch_lottery", Severity.WARNING,
                    f"{head}: a bad launch -> restart it once", evidence, s.engine_run_id,
                    Response.RELAUNCH)]


def run_acceptance(run: Window, start_s: float,
                   end_s: float) -> tuple[float, list[float]] | None:
    """(drafts, acceptance per position) over ``[start_s, end_s]`` of one run, or None
    (the launch lottery's arithmetic, for the good-run baselines)."""
    return _acceptance(run, start_s, end_s)


def _acceptance(run: Window, start_s: float, end_s: float) -> tuple[float, list[float]] | None:
    """(drafts, acceptance per position) over ``[start_s, end_s]`` of one run, or None."""
    part = run.between(start_s, end_s)
    drafts = part.increase(DRAFTS, start_s)
    accepted = part.increase_by_position(PER_POSITION, start_s)
    if drafts is None or accepted is None or drafts[0] <= 0:
        return None
    return drafts[0], [a / drafts[0] for a in accepted]


def _acceptance_anomaly(sit: Situation) -> list[Finding]:
    """Every position accepted (~100%, mean length k + 1) over the last N drafts, against
    a lower history, with several requests running (vllm #40756)."""
    cfg = sit.policy.guards.speculative
    run = Window.of(sit.run_samples())
    now = sit.now_s
    start = since_last(run, DRAFTS, cfg.acceptance_recent_drafts)
    if start is None:
        return []
    recent = _acceptance(run, start, now)
    if recent is None or not recent[1] or min(recent[1]) < cfg.acceptance_jump_ratio:
        return []
    drafts, by_pos = recent
    first = next(iter(run), None)
    history = _acceptance(run, first.t_s, start) if first is not None else None
    if history is None or history[0] < cfg.min_drafts:
        return []
    past = statistics.fmean(history[1])
    if past >= cfg.acceptance_jump_ratio - 0.1:
        return []
    running = [x.requests_running for x in run if x.t_s >= start
               and x.requests_running is not None]
    mean_running = statistics.fmean(running) if running else None
    if mean_running is None or mean_running < cfg.anomaly_min_running:
        return []
    k = len(by_pos)
    length = 1 + sum(by_pos)
    s = sit.latest
    return [Finding(GUARD, "spec_acceptance_anomaly", Severity.WARNING,
                    f"every draft accepted: mean acceptance length {length:.2f} with k={k} over "
                    f"the last {drafts:.0f} drafts (run so far {past:.0%}) at "
                    f"{mean_running:.1f} requests running: a known precursor of "
                    "speculative-decoding crashes (vllm #40756)",
                    {"mean_acceptance_length": round(length, 3), "k": k,
                     "acceptance_by_position": [round(a, 4) for a in by_pos],
                     "drafts": drafts, "history_acceptance_ratio": round(past, 4),
                     "history_drafts": history[0],
                     "requests_running_mean": round(mean_running, 2),
                     "jump_ratio": cfg.acceptance_jump_ratio, "mode": sit.mode.name},
                    s.engine_run_id if s else None, Response.RECORD)]


def _structured_output(sit: Situation) -> list[Finding]:
    """xgrammar's "Failed to advance FSM" lines while the engine still serves: a warning
    on record (a crash or hang with them skips speculation: ``engine_dead``,
    ``engine_hung``)."""
    lines = sum(t == "structured_output_fsm" for x in sit.run_samples()
                for t in x.engine_log_tags)
    if lines < sit.policy.guards.speculative.fsm_warning_lines:
        return []
    s = sit.latest
    return [Finding(GUARD, "spec_structured_output", Severity.WARNING,
                    f"{lines} 'Failed to advance FSM' lines with speculation on: structured "
                    "output and speculative decoding disagree (vllm #51660); requests still "
                    "served", {"fsm_lines": lines, "mode": sit.mode.name},
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
    running = [x.requests_running for x in samples if x.requests_running is not None]
    mean_running = statistics.fmean(running) if running else 1.0
    if tpot_sum is not None and finished is not None:
        if finished[0] < MIN_FINISHED or tpot_sum[0] <= 0:
            return []                       # not enough requests finished to judge
        per_request, source = finished[0] / tpot_sum[0], "time per output token"
    else:
        # No TPOT histogram on this build: generation tokens/s per running request
        # (vllm #19254 judged it from the logged generation throughput and Running).
        gen = part.rate("generation_tokens_total", span, now)
        if gen is None or not running or min(running) < 1:
            return []                       # idle spells: the per-request rate means nothing
        per_request, source = gen / mean_running, "generation tokens/s per running request"
    conc, base = min(baseline, key=lambda b: abs(b[0] - mean_running))
    if per_request >= cfg.slower_ratio * base:
        return []
    return [Finding(GUARD, "spec_slower_than_plain", Severity.WARNING,
                    f"{sit.mode.name} decodes {per_request:.0f} tokens/s per request "
                    f"(~{mean_running:.1f} running); {plain_mode} was calibrated at "
                    f"{base:.0f} at {conc:g}: speculation does not pay",
                    {"mode": sit.mode.name,
                     "tokens_per_second_per_request": round(per_request, 1),
                     "requests_finished": finished[0] if finished is not None else None,
                     "requests_running_mean": round(mean_running, 2),
                     "baseline_mode": plain_mode, "baseline_concurrency": conc,
                     "baseline_tokens_per_second_per_request": base,
                     "ratio": round(per_request / base, 3), "slower_ratio": cfg.slower_ratio,
                     "measured_from": source,
                     "sustain_seconds": span}, s.engine_run_id,
                    Response.SKIP_SPECULATION_WHEN_CALM)]

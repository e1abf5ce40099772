"""Guard ``platform_slow``: decode steps slower than calibrated at the same load, NVML silent.

tonyd2wild/DeepSeek-V4.1-Flash-vLLM-DGX-Spark#1: a GB10 "flips between a fast and a slow
hidden state (decode 63 vs 94 ms/step); nvidia-smi shows nothing"; after the fleet was
power-cycled the steps ran 49-50 ms and the split was not seen again. No mode fixes it
and a restart of the engine does not either: a warning on record that names the power
cycle, never a restart loop.

Per-request decode speed (1 / mean time per output token of the requests that finished
in the last ``platform_slow_sustain_seconds``, ``vllm:request_time_per_output_token_seconds``;
without that histogram, generation tokens/s per running request) against the mode's own
calibrated figure (``Situation.baselines``, ``supervisor calibrate``) at the nearest
concurrency: under ``platform_slow_ratio`` of it, with NVML reporting no throttle reason
(``throttle_reasons``) and no clock under ``low_clock_ratio`` of its maximum on any sample
(those are the thermal guard's ``gpu_throttling`` and ``platform_low_power_state``).
Modes with speculation are not judged: their speed follows the drafts' acceptance, which
a change of traffic moves (``spec_drift`` and ``spec_slower_than_plain`` read it). Pure.
"""

from __future__ import annotations

import statistics

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

__all__ = ["GUARD", "check"]

GUARD = "platform_slow"
#: Requests that must finish within the period before the TPOT histogram is trusted.
MIN_FINISHED = 4


def _nvml_silent(sit: Situation, span: list[Sample]) -> bool:
    """No throttle reason and no low clock on any sample of ``span``."""
    cfg = sit.policy.guards.thermal
    bad = set(cfg.throttle_reasons)
    for x in span:
        if bad & set(x.gpu_clock_event_reasons or ()):
            return False
        if x.gpu_sm_clock_mhz is not None and x.gpu_sm_clock_max_mhz \
                and x.gpu_sm_clock_mhz <= cfg.low_clock_ratio * x.gpu_sm_clock_max_mhz:
            return False
    return True


def _speed(span: list[Sample], seconds: float, now: float) -> tuple[float, float, str] | None:
    """(tokens/s per request, mean running, what it was measured from), or None."""
    part = Window.of(span)
    running = [x.requests_running for x in span if x.requests_running is not None]
    if not running or min(running) < 1:
        return None                          # idle spells: the per-request rate means nothing
    mean_running = statistics.fmean(running)
    tpot = part.increase("request_tpot_sum_seconds_total", now - seconds)
    finished = part.increase("request_tpot_count_total", now - seconds)
    if tpot is not None and finished is not None and finished[0] >= MIN_FINISHED \
            and tpot[0] > 0:
        return finished[0] / tpot[0], mean_running, "time per output token"
    gen = part.rate("generation_tokens_total", seconds, now)
    if gen is None:
        return None
    return gen / mean_running, mean_running, "generation tokens/s per running request"


def check(sit: Situation) -> list[Finding]:
    """A warning on record when decoding runs under ``platform_slow_ratio`` of the mode's
    calibrated speed at the same load while NVML reports nothing; else none."""
    cfg = sit.policy.guards.thermal
    s, mode = sit.latest, sit.mode
    baseline = sorted(sit.baselines.get(mode.name, ()))
    if s is None or s.engine_state is not EngineState.READY or mode.speculative \
            or not baseline or s.engine_state_since_s is None:
        return []
    now, span_s = sit.now_s, cfg.platform_slow_sustain_seconds
    if now - s.engine_state_since_s < span_s:
        return []
    span = [x for x in sit.run_samples() if x.t_s >= now - span_s]
    if not span or span[0].t_s > now - 0.9 * span_s or not _nvml_silent(sit, span):
        return []
    got = _speed(span, span_s, now)
    if got is None:
        return []
    speed, running, source = got
    conc, base = min(baseline, key=lambda b: abs(b[0] - running))
    if base <= 0 or not speed < cfg.platform_slow_ratio * base:
        return []
    return [Finding(GUARD, "platform_slow_state", Severity.WARNING,
                    f"{mode.name} decodes {speed:.1f} tokens/s per request (~{running:.1f} "
                    f"running) against {base:g} calibrated at {conc:g}: steps {base / speed:.2f}x "
                    "as long with NVML reporting no throttling and no low clock: a slow "
                    "platform state (in the field a power cycle cleared it, "
                    "tonyd2wild/DeepSeek-V4.1-Flash-vLLM-DGX-Spark#1); on record, no restart",
                    {"mode": mode.name, "tokens_per_second_per_request": round(speed, 2),
                     "requests_running_mean": round(running, 2), "baseline_concurrency": conc,
                     "baseline_tokens_per_second_per_request": base,
                     "step_time_ratio": round(base / speed, 3) if speed > 0 else None,
                     "platform_slow_ratio": cfg.platform_slow_ratio, "measured_from": source,
                     "sustain_seconds": span_s, "gpu_sm_clock_mhz": s.gpu_sm_clock_mhz,
                     "gpu_power_w": s.gpu_power_w,
                     "clock_event_reasons": list(s.gpu_clock_event_reasons or ())},
                    s.engine_run_id, Response.RECORD)]

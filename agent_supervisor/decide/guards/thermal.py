"""Guard ``thermal``: the GPU or the SoC is hot, NVML reports throttling, or the GPU is
stuck in a low-power state.

Heat and throttling are warnings that shed load first (the gateway's limits), and step
down if they persist once shed. The SoC/CPU temperature comes from hwmon
(``psutil.sensors_temperatures()``): on GB10 the SoC runs hot before the GPU reports
anything. A stuck low-power state (SM clock far under its maximum at high utilisation,
no throttle reason, sustained) is a warning on record (``platform_low_power_state``): no
mode change helps, an operator's power cycle does. Throttling makes the engine slow,
not hung; the hang guard reads progress, never clocks. Temperature and clock-event
reasons from NVML, which GB10 supports (only its memory queries are Not Supported). Pure.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.telemetry.sample import Sample

__all__ = ["GUARD", "check"]

GUARD = "thermal"


def check(sit: Situation) -> list[Finding]:
    """Warnings (shed first) for a hot or throttling GPU."""
    cfg = sit.policy.guards.thermal
    s = sit.latest
    if s is None:
        return []
    out = []
    now = sit.now_s

    def hot(x: Sample) -> bool:
        return x.gpu_temperature_c is not None and x.gpu_temperature_c >= cfg.max_temperature_c

    held = sit.window.held_for(hot, now)
    if held >= cfg.sustain_seconds:
        out.append(Finding(GUARD, "gpu_hot", Severity.WARNING,
                           f"GPU at {s.gpu_temperature_c:g} C for {held:.0f} s (limit "
                           f"{cfg.max_temperature_c:g} C)",
                           {"gpu_temperature_c": s.gpu_temperature_c,
                            "max_temperature_c": cfg.max_temperature_c,
                            "held_seconds": round(held, 1), "gpu_power_w": s.gpu_power_w,
                            "gpu_sm_clock_mhz": s.gpu_sm_clock_mhz},
                           s.engine_run_id, Response.SHED_FIRST))
    bad = set(cfg.throttle_reasons)

    def throttled(x: Sample) -> bool:
        return bool(x.gpu_clock_event_reasons and bad & set(x.gpu_clock_event_reasons))

    held = sit.window.held_for(throttled, now)
    if held >= cfg.throttle_sustain_seconds:
        reasons = sorted(bad & set(s.gpu_clock_event_reasons or ()))
        out.append(Finding(GUARD, "gpu_throttling", Severity.WARNING,
                           f"GPU throttling ({', '.join(reasons)}) for {held:.0f} s",
                           {"reasons": reasons, "held_seconds": round(held, 1),
                            "gpu_temperature_c": s.gpu_temperature_c,
                            "gpu_power_w": s.gpu_power_w, "gpu_sm_clock_mhz": s.gpu_sm_clock_mhz},
                           s.engine_run_id, Response.SHED_FIRST))
    return [*out, *_soc(sit), *_low_power(sit)]


def _soc(sit: Situation) -> list[Finding]:
    """The SoC/CPU (hwmon) hot: shed first, like the GPU."""
    cfg = sit.policy.guards.thermal
    s = sit.latest

    def hot(x: Sample) -> bool:
        return x.host_temperature_c is not None \
            and x.host_temperature_c >= cfg.max_host_temperature_c

    held = sit.window.held_for(hot, sit.now_s)
    if s is None or held < cfg.sustain_seconds:
        return []
    gpu = "unknown" if s.gpu_temperature_c is None else f"{s.gpu_temperature_c:g} C"
    return [Finding(GUARD, "soc_hot", Severity.WARNING,
                    f"SoC/CPU at {s.host_temperature_c:g} C for {held:.0f} s (limit "
                    f"{cfg.max_host_temperature_c:g} C; GPU {gpu})",
                    {"host_temperature_c": s.host_temperature_c,
                     "max_host_temperature_c": cfg.max_host_temperature_c,
                     "gpu_temperature_c": s.gpu_temperature_c, "held_seconds": round(held, 1)},
                    s.engine_run_id, Response.SHED_FIRST)]


def _low_power(sit: Situation) -> list[Finding]:
    """SM clock far under its maximum at high utilisation, no throttle reason, over
    ``low_power_sustain_seconds`` of loaded samples (idle samples neither count nor break:
    idle clocks are low by design)."""
    cfg = sit.policy.guards.thermal
    bad = set(cfg.throttle_reasons)
    since = sit.now_s - cfg.low_power_sustain_seconds
    loaded = [x for x in sit.window if x.t_s >= since
              and x.gpu_utilization_ratio is not None and x.gpu_sm_clock_mhz is not None
              and x.gpu_sm_clock_max_mhz and x.gpu_utilization_ratio
              >= cfg.low_power_utilization_ratio]
    if len(loaded) < 2 or loaded[-1].t_s - loaded[0].t_s < 0.8 * cfg.low_power_sustain_seconds:
        return []
    if not all((x.gpu_sm_clock_mhz or 0.0) <= cfg.low_clock_ratio * (x.gpu_sm_clock_max_mhz or 0.0)
               and not (bad & set(x.gpu_clock_event_reasons or ())) for x in loaded):
        return []
    s = loaded[-1]
    return [Finding(GUARD, "platform_low_power_state", Severity.WARNING,
                    f"GPU at {s.gpu_sm_clock_mhz:g} of {s.gpu_sm_clock_max_mhz:g} MHz at "
                    f"{s.gpu_utilization_ratio:.0%} utilisation for "
                    f"{loaded[-1].t_s - loaded[0].t_s:.0f} s with no throttle reason: a stuck "
                    "low-power platform state (an AC power cycle resets it)",
                    {"gpu_sm_clock_mhz": s.gpu_sm_clock_mhz,
                     "gpu_sm_clock_max_mhz": s.gpu_sm_clock_max_mhz,
                     "gpu_utilization_ratio": s.gpu_utilization_ratio,
                     "gpu_power_w": s.gpu_power_w,
                     "clock_event_reasons": list(s.gpu_clock_event_reasons or ()),
                     "loaded_samples": len(loaded)}, s.engine_run_id, Response.RECORD)]

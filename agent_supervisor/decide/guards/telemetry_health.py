"""Guard ``telemetry_health``: a series a guard needs is missing on this engine build.

vLLM renames and drops metrics between versions (``vllm:gpu_cache_usage_perc`` became
``vllm:kv_cache_usage_perc``; a build without the per-position acceptance counter, an
NVML without power), and a missing series is unknown, never 0 (``agent_supervisor.sense.names``).
Once the engine has been ready for ``GRACE_SECONDS`` with ``/metrics`` read (its ``CORE``
series present), a field in ``NEEDS`` that the engine exports (its profile's series,
``agent_supervisor.telemetry.engine_series``) and that stayed unknown on all of them gives one
warning on record naming the guards that cannot judge (the executor notes a finding once
per run). A series the engine never exports is not missing (issue 29: llama-server has no
preemption counter and no KV-cache series, and every llama-server run carried the warning).
Unknown stays unknown: no guard reads the gap as 0. A scrape that failed (``metrics_error``)
is not a missing series. The warning is ``standing`` (a fact about the build, true on every
tick): it does not reset the ladder's calm clock, or a build without a series would never
step up or restore a shed (llama-server exports no KV-cache series since llama.cpp #13660,
see #22879; defilantech/LLMKube#1373 lists all eleven ``llamacpp:`` series of a live
server). Pure.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.engine_series import exported_series

__all__ = ["GUARD", "NEEDS", "check"]

GUARD = "telemetry_health"
#: Ready this long, with /metrics read, before a series counts as missing.
GRACE_SECONDS = 120.0

#: Series every build of every engine exposes: their presence says /metrics was read.
CORE = ("requests_running", "generation_tokens_total")
#: Sample field -> (the guards that read it, when it is expected).
#: ``engine``: every engine; ``speculative``: a mode with speculation; ``gpu``: NVML works
#: (``gpu_name`` known).
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "iteration_tokens_count_total": (("engine_hung",), "engine"),
    "generation_tokens_total": (("engine_hung", "preemption_storm", "speculative"), "engine"),
    "prompt_tokens_total": (("engine_hung",), "engine"),
    "requests_running": (("engine_hung", "speculative"), "engine"),
    "requests_waiting": (("engine_hung", "preemption_storm"), "engine"),
    "preemptions_total": (("preemption_storm",), "engine"),
    "kv_cache_usage_ratio": (("preemption_storm (evidence)",), "engine"),
    "spec_decode_num_drafts_total": (("speculative",), "speculative"),
    "spec_decode_accepted_per_position_total": (("speculative",), "speculative"),
    "gpu_temperature_c": (("thermal",), "gpu"),
    "gpu_power_w": (("engine_hung (power hint)",), "gpu"),
    "gpu_utilization_ratio": (("engine_hung (power hint)", "thermal"), "gpu"),
}


def check(sit: Situation) -> list[Finding]:
    """One warning on record listing the missing series and the guards they blind."""
    s = sit.latest
    if s is None or s.engine_state is not EngineState.READY or s.engine_state_since_s is None:
        return []
    if sit.now_s - s.engine_state_since_s < GRACE_SECONDS:
        return []
    run = [x for x in sit.run_samples() if x.t_s >= s.engine_state_since_s]
    # A scrape of the engine: read without error, and its oldest series there (every vLLM
    # build since v0.4, every llama-server); without them the source is no engine /metrics.
    scraped = [x for x in run if x.metrics_error is None and all(
        getattr(x, f) is not None for f in CORE)]
    if len(scraped) < 2 or scraped[-1].t_s - scraped[0].t_s < GRACE_SECONDS / 2:
        return []
    gpu = any(x.gpu_name is not None for x in run)
    # The running engine's mode (the ladder may already have moved on: a step up drains it).
    mode = sit.policy.modes[s.engine_rung] if s.engine_rung is not None else sit.mode
    expected = {"engine": True, "speculative": mode.speculative, "gpu": gpu}
    exports = exported_series(sit.policy.engine.kind)
    missing = sorted(f for f, (_, when) in NEEDS.items()
                     if expected[when] and (when == "gpu" or exports is None or f in exports)
                     and all(getattr(x, f) is None for x in scraped))
    if not missing:
        return []
    blind = sorted({g for f in missing for g in NEEDS[f][0]})
    return [Finding(GUARD, "telemetry_degraded", Severity.WARNING,
                    f"this engine build does not expose {', '.join(missing)}: "
                    f"{', '.join(blind)} cannot judge (unknown, not 0)",
                    {"missing": missing, "guards": blind, "samples": len(scraped),
                     "mode": mode.name, "run_id": s.engine_run_id},
                    s.engine_run_id, Response.RECORD, standing=True)]

"""The guards' thresholds: one pydantic section per guard, gathered in ``Guards``.

Every threshold has a default and a one-line reason for it (the public report it comes
from where there is one). Defaults are sized for a DGX Spark (GB10, 128 GB unified
memory); the CPU demo policy scales the memory ones down. ``LifecycleSpec`` (the edges of
the engine's life, judged by the start-up and stop guards) is here too.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from agent_supervisor.policy.base import (
    MAX_COUNT,
    Bytes,
    Count,
    CountOrZero,
    Delay,
    GiB,
    PolicyModel,
    Ratio,
    Seconds,
    Tokens,
)

__all__ = [
    "AdmissionStallGuard",
    "EngineHungGuard",
    "EngineUpdateGuard",
    "Guards",
    "LifecycleSpec",
    "LoadBudgetGuard",
    "MemoryFloorGuard",
    "MemoryForecastGuard",
    "MemoryPressureGuard",
    "PreemptionGuard",
    "SampleGapsGuard",
    "SpeculativeGuard",
    "ThermalGuard",
]


class EngineHungGuard(PolicyModel):
    """Requests present, no engine step and no token for ``stall_seconds``, and a canary
    that failed: the engine is hung (vLLM's /health stays 200 then: vllm PR #24897)."""

    stall_seconds: Seconds = 60.0
    """60 s: far beyond one engine step even for a long chunked prefill on a GB10 (steps
    take tens to hundreds of ms), short enough that agents' requests time out later."""
    ready_grace_seconds: Delay = 30.0
    """No verdict this long after /health first answered (warm-up, first compile)."""
    suspect_seconds: Seconds = 30.0
    """Flat this long with a canary on its way: a hang is suspected; shed the gateway's
    limits until the canary answers (half the stall window: a brief stall sheds nothing)."""
    stall_seconds_per_million_prompt_tokens: Delay = 600.0
    """The stall window grows with the prompt tokens the gateway has in flight: one
    chunked-prefill step at ~560K tokens of context can run for minutes on 2x GB10
    (eugr/spark-vllm-docker#409: the one that never finished ran > 11 min). 600 s per
    million tokens gives a 560K prompt a window of 60 + 336 s; the report's 11 minutes
    are still a hang."""
    huge_prompt_tokens: Tokens = 100_000
    """A hang with at least this many prompt tokens in flight steps to the first rung whose
    context cap (``--max-model-len`` or the gateway's ``max_prompt_tokens``) is below it,
    not the same configuration again."""
    power_hint_utilization_ratio: Ratio = 0.9
    """The wedged-kernel hint's utilisation: GPU utilisation at or above this with power at
    or under ``power_hint_max_w``."""
    power_hint_max_w: Annotated[float, Field(gt=0, le=100_000)] = 30.0
    """GPU utilisation >= 90% while power stays <= 30 W with requests in flight: a wedged
    kernel spinning (eugr/spark-vllm-docker#260: healthy GB10 ~45 W, up to ~90 W; wedged
    16-27 W at ~95% util; "below ~30 W"). A hint, never a verdict alone: it shortens the
    stall window to ``power_hint_stall_seconds`` (the canary still decides)."""
    power_hint_stall_seconds: Seconds = 20.0
    """The stall window while that hint holds (on at least half of it); the canary still
    decides."""


class AdmissionStallGuard(PolicyModel):
    """Requests waiting, none finishing, the KV cache far from full: the scheduler stopped
    admitting while prompt tokens still advance (vllm #53130: 487 waiting, 4 running, KV
    20%, request_success_total +0 for over 1.5 h, /health 200). A hang: restart."""

    stall_seconds: Seconds = 300.0
    """No request finished this long while requests waited throughout and their number
    did not fall: 5 min, many times a long agent turn's queueing at a healthy engine and
    far under the reports' hours. A huge prompt in flight lengthens it as the hang guard's
    window does (``engine_hung.stall_seconds_per_million_prompt_tokens``)."""
    kv_far_from_full_ratio: Ratio = 0.8
    """KV-cache usage at or under this on every sample of the stall counts as far from
    full; above it a waiting queue is KV pressure (preemption), the preemption guard's
    business. 0.8: the report's stall sat at 20-21%; a saturated cache reads 0.9-1.0."""
    ready_grace_seconds: Delay = 60.0
    """No verdict this long after the engine first served (warm-up)."""


class MemoryFloorGuard(PolicyModel):
    """MemAvailable under the floor on consecutive samples, or NV_ERR_NO_MEMORY in the
    kernel log: kill the engine now. A GB10 host was seen to freeze ~5 s later."""

    min_available_bytes: Bytes = 6 * GiB
    """6 GiB of 128: the OS, the supervisor and the agents' own processes need a few GB;
    below that the unified-memory box thrashes and freezes (DGX Spark reports)."""
    consecutive_samples: Count = 2
    """Two: one low reading can be a transient page-cache swing; two in a row at a 1 s
    tick still act within ~2 s."""
    start_margin_bytes: Bytes = GiB
    """While no engine runs, MemAvailable under the floor holds the next start (something
    else holds the memory: a start would only be killed again); once it was under, the
    start waits for the floor plus this margin, so one reading just above the floor does
    not launch an engine into it. 1 GiB: above an idle box's page-cache swing, a sixth of
    the default floor."""


class MemoryForecastGuard(PolicyModel):
    """A falling MemAvailable projected to hit the floor within the horizon: step down
    gracefully, before the emergency."""

    horizon_seconds: Seconds = 300.0
    """5 min: long enough for a graceful drain and restart, short enough not to react
    to the normal growth of the KV cache's working set."""
    fit_seconds: Seconds = 120.0
    """Least-squares fit over the last 2 min of samples."""
    min_samples: Annotated[Count, Field(ge=3)] = 20
    """Samples the fit needs (at least 3) before it forecasts."""
    ignore_after_ready_seconds: Delay = 120.0
    """Start-up allocation (weights, KV cache, CUDA graphs) is not a trend."""
    creep_record_seconds: Seconds = 86400.0
    """A slower creep that would reach the floor within a day is recorded (info)."""
    creep_floor_bytes: Bytes | None = None
    """The creep floor, above the emergency floor (None: twice ``memory_floor``'s). A slow
    decline that reaches it within ``creep_horizon_seconds`` earns a warning and a planned
    restart at a calm moment (a restart hands leaked memory back; the emergency floor
    stays the emergency)."""
    creep_horizon_seconds: Seconds = 21600.0
    """6 h: leaks of 5-12 MiB per request reach 9.35 GiB in 5.5 h (ollama #18106); vLLM's
    worker RSS grew ~0.55 GB/h (vllm #2345). Hours, not minutes: the restart waits for a
    calm moment."""
    creep_calm_max_wait_seconds: Seconds = 3600.0
    """The planned restart waits for a calm moment (``speculative.calm_max_requests``
    running, none waiting) at most this long: the creep floor is hours away."""
    creep_min_seconds: Seconds = 600.0
    """The creep is fitted over the run's samples in the window, at least 10 min of them."""
    swap_creep_bytes_per_hour: Bytes = 256 * 1024**2
    """The engine tree's RssAnon + VmSwap growing at least this fast (fitted like the
    creep) is a leak even while VmRSS stays flat (pages leaving for swap): 256 MiB/h, half
    of vllm #2345's 0.55 GB/h. Recorded (info); a warning and a planned restart when
    MemAvailable above the creep floor plus free swap runs out within
    ``creep_horizon_seconds`` at that rate."""


class SampleGapsGuard(PolicyModel):
    """Gaps in the supervisor's own samples: the host froze, or the supervisor was not
    scheduled (a busy CPU engine starved it for 1-13 s, shared/CPU_ENGINE.md)."""

    record_seconds: Seconds = 10.0
    """A gap this long is recorded (info): a fact about the box, never about the engine."""
    long_gap_seconds: Seconds = 60.0
    """A gap this long with memory near full steps down: the box may have frozen on memory
    (a 627 s telemetry gap with 124,258 of 124,546 MiB used: AEON-7/vllm-ultimate-dgx-spark#9)."""
    near_full_available_bytes: Bytes | None = None
    """MemAvailable under this after a long gap counts as near full (None: twice the
    emergency floor)."""


    starved_seconds: Seconds = 120.0
    """A gap this long while the engine served (ready on both sides of it) is a warning on
    record: the box starved the supervisor for minutes (its guards saw nothing meanwhile);
    still never a verdict on the engine (issue 29: it was an info line)."""


class MemoryPressureGuard(PolicyModel):
    """PSI memory ``full`` (all tasks stalled on memory) sustained: step down."""

    full_avg10_ratio: Ratio = 0.10
    """10% of wall time fully stalled over 10 s is severe thrashing (PSI docs: any
    sustained ``full`` stall means lost throughput)."""
    sustain_seconds: Seconds = 30.0
    """The stall at or above ``full_avg10_ratio`` this long: step down."""


class PreemptionGuard(PolicyModel):
    """Preemptions relative to the work done, sustained, while requests wait (the engine's
    gauge or the gateway's queue) and generation collapses: fewer sequences. High KV usage
    alone is normal (vLLM fills the cache by design)."""

    preemptions_per_1k_tokens: Annotated[float, Field(gt=0, le=1000)] = 1.0
    """Preemptions per 1,000 generated tokens over ``sustain_seconds``. Under KV pressure
    vLLM V1 recomputes 10-23% of the work online and 32-79% in a thrash, each preemption
    wasting 261-415 tokens (vllm #54644): at ~400 tokens each, 1 per 1,000 generated is a
    recompute tax of ~30%, the thrash side of that range. Relative, so a slow box and a
    fast one are judged alike."""
    min_preemptions: Count = 10
    """Never on the first preemptions: at least this many within ``sustain_seconds``."""
    preemptions_per_second: Annotated[float, Field(gt=0, le=MAX_COUNT)] | None = None
    """Optional absolute floor as well (older policies); None: only the relative rate."""
    sustain_seconds: Seconds = 45.0
    """45 s of storm before the shed: acting within about a minute of onset."""
    throughput_drop_ratio: Ratio = 0.2
    """Generation tokens/s over the storm at least 20% below the period before it."""
    recur_seconds: Seconds = 1800.0
    """A storm back within this long of the last shed it asked for, once that shed was
    restored: the shed only hid it until the restore, so step down to fewer sequences
    instead of shedding again (``preemption_storm_recurring``). 30 min: more than the
    default ``hysteresis.cooldown_seconds`` (5 min of calm before a restore) plus the
    storm's return, short of the hour-long waves of an agent fleet's day."""


class ThermalGuard(PolicyModel):
    """Hot or throttling GPU: shed load first (gateway limits), then step down.
    Throttling is slow, not hung: no other guard reads it as a hang."""

    max_temperature_c: Annotated[float, Field(gt=0, le=200)] = 87.0
    """87 C: at the GB10's reported slowdown region; NVML also reports it directly."""
    sustain_seconds: Seconds = 60.0
    """The GPU at or above ``max_temperature_c``, or the host at or above
    ``max_host_temperature_c``, this long: shed, then step down."""
    throttle_reasons: list[str] = ["hw_slowdown", "hw_thermal_slowdown",
                                   "sw_thermal_slowdown", "hw_power_brake_slowdown"]
    """NVML clock-event reasons that mean trouble (sw_power_cap is routine at full load)."""
    throttle_sustain_seconds: Seconds = 30.0
    """One of ``throttle_reasons`` this long: shed, then step down."""
    max_host_temperature_c: Annotated[float, Field(gt=0, le=200)] = 95.0
    """The hottest SoC/CPU sensor (hwmon): 95 C is where a GB10's SoC peaked under
    sustained load before the fix, the OS force-shutdown at 104.8 C (MiaAI-Lab/DeepSeek-
    v4-Flash-DSpark-2x-DGX-Spark#79; overheating shutdowns without logs in #146)."""
    low_clock_ratio: Ratio = 0.5
    """SM clock at or under half its maximum ..."""
    low_power_utilization_ratio: Ratio = 0.8
    """... at this utilisation or more, with no throttle reason, for
    ``low_power_sustain_seconds`` of loaded samples: the GB10 stuck low-power platform
    state (Blackwellboy/model-serving-minefield#55: heavily utilised, never boosts, survives
    software controls, only an AC power removal resets it). A warning: a restart does not
    help, an operator must."""
    low_power_sustain_seconds: Seconds = 300.0
    """Loaded samples in the stuck low-power state over this long: the warning (see
    ``low_power_utilization_ratio``)."""
    platform_slow_ratio: Ratio = 0.75
    """Per-request decode speed under this x the mode's calibrated figure at the same load,
    NVML silent, over ``platform_slow_sustain_seconds``: a slow platform state on record
    (``platform_slow``). 0.75 (steps a third longer): the GB10's hidden slow state ran 94
    against 63 ms a step, 0.67x (tonyd2wild/DeepSeek-V4.1-Flash-vLLM-DGX-Spark#1)."""
    platform_slow_sustain_seconds: Seconds = 300.0
    """The period judged (at most the decision window)."""


class SpeculativeGuard(PolicyModel):
    """Speculative decoding: crash signatures, acceptance anomalies, no gain."""

    crash_tags: list[str] = ["cuda_illegal_memory_access", "device_side_assert",
                             "structured_output_fsm", "ggml_assert"]
    """Engine-log signatures that, in a crash with speculation on, point at speculation
    (``structured_output_fsm``: xgrammar's "Failed to advance FSM" under speculation, then
    failed requests and engine death: vllm #51660, #44006; ``ggml_assert``: llama.cpp's
    GGML_ASSERT abort, with speculation in llama.cpp #23500, #23398)."""
    fsm_warning_lines: Count = 1
    """FSM lines alone while the engine serves: a warning on record (requests recover with
    HTTP 200 in vllm #53777 and #53181); a crash or hang with them skips speculation."""
    crash_xids: list[CountOrZero] = [13, 31, 43]
    """Kernel Xid codes read the same way (31: MMU fault, the usual illegal address)."""
    acceptance_jump_ratio: Ratio = 0.98
    """Every draft position accepted at this rate or more over the last
    ``acceptance_recent_drafts`` drafts (mean acceptance length ~ k + 1), against a run
    history clearly below it, with several requests running: the precursor of the MTP
    illegal-memory-access crash (vllm #40756: "Mean acceptance length: 6.00 ... Avg Draft
    acceptance rate: 100.0%" with k=5, then the crash). A warning on record, alerted."""
    acceptance_recent_drafts: Count = 50
    """The jump is judged over the last 50 drafts, however long they took."""
    anomaly_min_running: Annotated[float, Field(ge=1, le=MAX_COUNT)] = 2.0
    """One stream repeating text legitimately reaches 100% at every position (a degenerate
    or echoed output); the whole batch at 100% does not (#40756: Running: 5 reqs)."""
    min_drafts: Count = 50
    """Ratios over fewer drafts say little."""
    prefix_min_query_tokens: Tokens = 50_000
    """Prefix caching defeated: over ``prefix_window_seconds`` at least this many prompt
    tokens looked up, at most ``prefix_max_hit_ratio`` of them found, while the gateway saw
    at least ``prefix_min_repeat_ratio`` of them as repeats of earlier prompts
    (``vllm:prefix_cache_hits_total`` 0 with speculation on a hybrid model, the same
    18,219-token prompt re-prefilled every time: vllm #54360; z-lab dflash #165)."""
    prefix_max_hit_ratio: Annotated[float, Field(ge=0, le=1)] = 0.01
    """Prefix caching is defeated only when at most this fraction of the looked-up prompt
    tokens was found in the cache (see ``prefix_min_query_tokens``)."""
    prefix_min_repeat_ratio: Ratio = 0.3
    """... and at least this fraction of them repeat earlier prompts, as the gateway saw
    them."""
    prefix_window_seconds: Seconds = 300.0
    """The window the prefix-cache check is judged over."""
    lottery_drafts: Count = 200
    """The launch lottery: the first 200 drafts after ready are judged against the mode's
    usual acceptance by position (calibration, past good runs) ..."""
    lottery_ratio: Ratio = 0.75
    """... position 0 under 75% of its usual value is a bad launch (position 0 at 0.44
    against a usual 0.77 on one launch, fixed by a restart: issue 13's report; vLLM's own
    MTP position 0 reads 0.76-0.83 on the same workload, vllm PR #48892) ..."""
    good_run_seconds: Seconds = 1800.0
    """A run of a speculative mode ready this long with no warning or worse, and at least
    ``lottery_drafts`` drafts in the window, stores its acceptance by position as a
    baseline (source ``run``): the lottery then judges launches against the fleet's own
    recent good runs, not only calibration."""
    lottery_restarts: CountOrZero = 1
    """... restarted this many times; a further bad launch is ``spec_degraded`` (a warning
    on record, no more restarts: the speed guard may still step to no speculation)."""
    drift_recent_seconds: Seconds = 600.0
    """Acceptance drift: the recent period judged against the run's history before it
    (``spec_drift``); at most the decision window (``sampling.window_seconds``)."""
    drift_history_seconds: Seconds = 3600.0
    """The run must have served this long before the recent period: its first hour."""
    drift_ratio: Ratio = 0.7
    """Position-0 acceptance under 0.7x the run's history: a drift (sglang #37326 decays to
    ~0; a long-context mix lowers position 1 only to 0.77x, vllm #47602)."""
    drift_min_drafts: Count = 1000
    """Drafts the history needs before it is a baseline."""
    slower_ratio: Ratio = 0.9
    """Per-request tokens/s below 90% of the no-speculation rung's calibrated baseline at
    similar concurrency: speculation does not pay for itself here."""
    slower_sustain_seconds: Seconds = 60.0
    """Slower than ``slower_ratio`` this long before the step down."""
    calm_max_requests: CountOrZero = 1
    """A step down for lack of gain waits for a calm moment (at most this many requests
    running and none waiting) ..."""
    calm_max_wait_seconds: Seconds = 300.0
    """... but no longer than this."""


class EngineUpdateGuard(PolicyModel):
    """A run on a new engine version or image against the last good run of the previous
    one (``engine_update``; issue 29): a drop is named an update regression, a warning on
    record, no step (no rung fixes an engine build)."""

    enabled: bool = True
    """Compare at all (False: never)."""
    ratio: Ratio = 0.8
    """Position-0 acceptance or tokens/s per running request under 0.8x the previous
    version's good run: a regression (vllm #31030: 60 -> 28 tok/s after 0.10.2 -> 0.12.0
    with the same arguments; an update within a few per cent is noise: vllm #8284, 90 ->
    87 tok/s)."""
    min_busy_seconds: Seconds = 300.0
    """Seconds with requests running this run must have before its tokens/s is judged."""
    min_drafts: Count = 1000
    """Drafts this run must have before its acceptance is judged."""
    concurrency_tolerance: Ratio = 0.5
    """Tokens/s per request compare only when the mean of requests running is within
    this fraction of the good run's (batch size changes the per-request rate)."""


class LoadBudgetGuard(PolicyModel):
    """Prompt tokens in flight through the gateway above the mode's budget: shed."""

    sustain_seconds: Delay = 5.0
    """Prompt tokens in flight above the mode's ``gateway.max_tokens_in_flight`` this long:
    shed (0: at once)."""


class Guards(PolicyModel):
    """Every guard's thresholds (the engine-dead guard's are in ``restart``)."""

    engine_hung: EngineHungGuard = EngineHungGuard()
    admission_stall: AdmissionStallGuard = AdmissionStallGuard()
    memory_floor: MemoryFloorGuard = MemoryFloorGuard()
    memory_forecast: MemoryForecastGuard = MemoryForecastGuard()
    memory_pressure: MemoryPressureGuard = MemoryPressureGuard()
    sample_gaps: SampleGapsGuard = SampleGapsGuard()
    preemption_storm: PreemptionGuard = PreemptionGuard()
    thermal: ThermalGuard = ThermalGuard()
    speculative: SpeculativeGuard = SpeculativeGuard()
    load_budget: LoadBudgetGuard = LoadBudgetGuard()
    engine_update: EngineUpdateGuard = EngineUpdateGuard()

    @model_validator(mode="after")
    def _creep_above_floor(self) -> Guards:
        creep = self.memory_forecast.creep_floor_bytes
        if creep is not None and creep <= self.memory_floor.min_available_bytes:
            raise ValueError(f"memory_forecast.creep_floor_bytes ({creep}) must be above "
                             f"memory_floor.min_available_bytes "
                             f"({self.memory_floor.min_available_bytes})")
        return self


class LifecycleSpec(PolicyModel):
    """The edges of the engine's life: how a start is judged stuck, how long memory may
    take to come back after a stop, and the margin of a memory fallback
    (``agent_supervisor.decide.guards.startup`` and ``.stop_leftovers``)."""

    start_budget_floor_seconds: Seconds = 300.0
    """A start is stuck only after this long without progress (new log lines, CPU time of
    its processes, memory growing), or the learned budget of the mode if that is longer.
    300 s: cold FlashInfer JIT and autotune leave minutes of log silence while the CPU
    works (vllm #48031: ~7 min cold start on a GB10; a 17-minute cold boot is public)."""
    start_budget_factor: Annotated[float, Field(ge=1, le=100)] = 2.0
    """Learned budget = this x the longest recent successful start of the mode
    (``ready_at - started_at`` in the record)."""
    progress_cpu_ratio: Annotated[float, Field(gt=0, le=64)] = 0.05
    """CPU seconds per second of the process tree that count as work (5 % of a core): an
    API server waiting on a dead core uses far less."""
    progress_rss_bytes: Bytes = 16 * 1024**2
    """Growth of the tree's RSS between two samples that counts as work (weights loading)."""
    memory_return_ratio: Annotated[float, Field(ge=0, le=1)] = 0.9
    """The next start waits until MemAvailable is back to this fraction of what it was
    before the last launch ..."""
    memory_return_slack_bytes: Bytes = 2 * GiB
    """... or to within this many bytes of it, whichever asks less: on a small box 10 % is
    within the page-cache and other processes' everyday swing."""
    memory_return_timeout_seconds: Seconds = 120.0
    """Not back this long after the stop with no engine process left:
    ``memory_pinned_reboot_required`` (GB10 cold-load failures leave ~100 GiB pinned)."""
    fallback_margin_bytes: Bytes = 4 * GiB
    """Kept free when a memory fallback fits the engine to what was free at launch."""
    stack_dump_seconds: Annotated[float, Field(ge=0, le=10)] = 5.0
    """Before a hung engine, or one that ignored SIGTERM, is SIGKILLed, its processes'
    stacks are read for at most this long (py-spy; eu-stack or gdb for llama-server) and
    kept with the incident; the kill waits no longer, whatever the tool does. At most 10
    s (the kill's delay is bounded here); 0: no stacks (issue 31)."""

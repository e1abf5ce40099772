"""``Sample``: one instant of telemetry, the one value type that leaves the sensors.

Every field but the time is optional: a sensor that could not read a value leaves it
``None`` ("unknown"), never 0. Units are in the names (``_seconds``, ``_bytes``,
``_ratio`` for 0-1 fractions, ``_total`` for counters that only grow until the engine
restarts).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.node_sample import NodeSample

__all__ = ["Sample"]


@dataclass(frozen=True, slots=True)
class Sample:
    """Telemetry of one tick.

    Sources: ``engine_*`` from the launcher (it owns the process), the process tree from
    /proc through psutil, ``health_*`` from ``GET /health``, the rest from vLLM's
    ``/metrics`` (names and aliases in ``agent_supervisor.sense.names``).
    """

    t_s: float
    """Monotonic seconds when the tick began."""
    wall_s: float | None = None
    """The same instant as UTC epoch seconds (for calm-hour windows and the record)."""
    tick_lateness_seconds: float | None = None
    """How late this tick ran against its schedule: a fact about the box (CPU
    starvation), never a verdict on the engine."""

    # The engine process, as the launcher sees it.
    engine_state: EngineState | None = None
    engine_state_since_s: float | None = None
    engine_run_id: str | None = None
    engine_rung: int | None = None
    engine_pid: int | None = None
    engine_exit_code: int | None = None
    engine_exit_signal: int | None = None
    engine_crash_reason: str | None = None

    # The process tree under the API server.
    engine_core_alive: bool | None = None
    """Whether a ``VLLM::EngineCore`` process is under the API server. ``None`` when the
    engine runs without one (in-process engine) or the tree could not be read."""
    engine_processes: int | None = None
    engine_rss_bytes: int | None = None
    engine_cgroup_memory_bytes: int | None = None
    """What the engine's container's cgroup charges (``engine.runtime: container``), beside
    MemAvailable; None for a process engine."""

    # Probes.
    health_status: int | None = None
    """HTTP status of ``GET /health``; None when it did not answer in time."""
    health_latency_seconds: float | None = None

    # vLLM /metrics (gauges as read; counters as cumulative totals since engine start).
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage_ratio: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    iteration_tokens_count_total: float | None = None
    """Engine steps so far (``vllm:iteration_tokens_total_count``): the heartbeat."""
    preemptions_total: float | None = None
    spec_decode_num_drafts_total: float | None = None
    spec_decode_num_draft_tokens_total: float | None = None
    spec_decode_num_accepted_tokens_total: float | None = None
    request_tpot_sum_seconds_total: float | None = None
    """Sum over finished requests of their time per output token (seconds)."""
    request_tpot_count_total: float | None = None
    """Finished requests counted in that sum."""
    spec_decode_accepted_per_position_total: tuple[float, ...] | None = None
    """Accepted draft tokens by position in the draft (0 first), from
    ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position}``."""
    corrupted_requests_total: float | None = None
    """Requests with NaN logits (``vllm:corrupted_requests_total``; vLLM exposes it only with
    ``VLLM_COMPUTE_NANS_IN_LOGITS=1``, v1/metrics/loggers.py 0.32.0)."""
    prefix_cache_queries_total: float | None = None
    """Prompt tokens looked up in the prefix cache (``vllm:prefix_cache_queries_total``)."""
    prefix_cache_hits_total: float | None = None
    """Of those, tokens found there (``vllm:prefix_cache_hits_total``)."""
    requests_finished_total: float | None = None
    """Requests the engine finished with an answer: ``vllm:request_success_total`` summed
    over ``finished_reason`` stop, length and repetition (abort and error left out: a
    client that gives up on a stalled queue is not progress). The heartbeat beside tokens
    (issue 29); None where the engine has no such series (llama-server)."""
    requests_waiting_capacity: float | None = None
    """Waiting requests held for scheduling capacity
    (``vllm:num_requests_waiting_by_reason{reason="capacity"}``, vLLM 0.32.0)."""
    requests_waiting_deferred: float | None = None
    """Waiting requests deferred by transient constraints: LoRA budget, KV transfer, a
    blocked status (``reason="deferred"``); the two add up to ``requests_waiting``."""
    metrics_error: str | None = None
    """Why ``/metrics`` could not be read this tick, if it could not."""
    engine_loop_answered: bool | None = None
    """Whether a request only the engine's own scheduling loop answers came back within the
    probe timeout (llama-server's ``/slots``; its ``/metrics`` goes through the same loop):
    False is evidence of a stalled loop (llama.cpp #27388: "/health OK but /slots hangs").
    None where the engine profile has no such probe (vLLM) or it was not sent."""

    # Canary: one tiny completion, sent only when progress looks stalled.
    canary_pending: bool | None = None
    canary_ok: bool | None = None
    """Result of the last finished canary of this run (None: none finished yet)."""
    canary_latency_seconds: float | None = None
    canary_finished_s: float | None = None
    """Monotonic seconds when that canary finished."""
    golden_canary_match: bool | None = None
    """Whether the last golden canary of this run (a fixed greedy prompt) answered the
    golden answer recorded for its model, mode and engine version (agent_supervisor/sense/
    golden.py); None: none judged yet (none finished, or its answer was recorded)."""
    golden_canary_mismatches: int | None = None
    """Golden canaries of this run in a row that differed from the golden answer."""
    golden_canary_finished_s: float | None = None
    """Monotonic seconds when the last judged golden canary finished."""
    golden_canary_note: str | None = None
    """What the last golden canary said: matched, recorded a new golden answer (first
    answer for its key), expected/got (the first 60 characters), or why it got none."""
    engine_slots_total: int | None = None
    """llama-server's slots (``GET /slots``, one object per ``--parallel`` slot); None
    where the engine has no such probe or it was not read."""
    engine_slots_processing: int | None = None
    """Of those, slots with ``is_processing`` true (agent_supervisor/sense/slots.py)."""

    # The box (/proc/meminfo, /proc/pressure/memory, psutil).
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    mem_free_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_free_bytes: int | None = None
    psi_memory_some_avg10_ratio: float | None = None
    psi_memory_some_avg60_ratio: float | None = None
    psi_memory_some_total_seconds: float | None = None
    psi_memory_full_avg10_ratio: float | None = None
    psi_memory_full_avg60_ratio: float | None = None
    psi_memory_full_total_seconds: float | None = None
    host_cpu_usage_ratio: float | None = None
    host_load1: float | None = None
    host_temperature_c: float | None = None
    """Hottest SoC/CPU sensor (hwmon through ``psutil.sensors_temperatures()``); on GB10 the
    SoC runs hot before the GPU reports anything."""

    # The engine's processes, by role.
    engine_pss_bytes: int | None = None
    api_server_rss_bytes: int | None = None
    engine_core_rss_bytes: int | None = None
    engine_workers_rss_bytes: int | None = None
    engine_rss_anon_bytes: int | None = None
    """Anonymous resident memory of the engine's process tree (``RssAnon`` of
    /proc/PID/status, summed): the heap a leak grows, without file-backed pages."""
    engine_swap_bytes: int | None = None
    """Swapped-out memory of the engine's process tree (``VmSwap``, summed): a leak that
    hides in swap keeps VmRSS flat while RssAnon + VmSwap grows (issue 29)."""

    # The GPU (NVML); all None where there is no GPU telemetry.
    gpu_name: str | None = None
    gpu_temperature_c: float | None = None
    gpu_power_w: float | None = None
    gpu_sm_clock_mhz: float | None = None
    gpu_sm_clock_max_mhz: float | None = None
    """The SM clock the GPU can reach (NVML max clock), for a clock stuck low."""
    gpu_utilization_ratio: float | None = None
    gpu_memory_used_bytes: int | None = None
    """None on GB10: NVML reports device memory as Not Supported on unified memory."""
    gpu_memory_total_bytes: int | None = None
    gpu_clock_event_reasons: tuple[str, ...] | None = None
    gpu_engine_memory_used_bytes: int | None = None
    gpu_xid_events: tuple[int, ...] | None = None
    """Xid codes NVML reported since the previous sample; None without GPU telemetry."""

    # Logs: what was classified since the previous sample.
    engine_log_tags: tuple[str, ...] = ()
    """Signature tags of the engine's new log lines (``agent_supervisor.sense.engine_log``)."""
    kernel_events: tuple[str, ...] | None = None
    """Kernel log events since the previous sample: ``xid:<code>``, ``nv_err_no_memory``,
    ``oom_kill:<pid>`` (``agent_supervisor.sense.kernel_log``); None when the kernel log cannot
    be read."""
    kernel_log_source: str | None = None
    """Where kernel lines come from: kmsg, journalctl, unavailable."""

    # The edges of the engine's life (agent_supervisor.decide.guards.startup, .stop_leftovers).
    engine_was_ready: bool | None = None
    """Whether this run ever answered /health 200 (None: no run yet)."""
    engine_sigterm_ignored: bool | None = None
    """The run's stop needed SIGKILL: it outlived SIGTERM past the grace period."""
    mem_available_before_launch_bytes: int | None = None
    """MemAvailable read just before this run was launched (a run field)."""
    processes_rss_before_launch_bytes: int | None = None
    """Summed RSS of every process on the box just before the launch."""
    processes_rss_bytes: int | None = None
    """Summed RSS of every process now (read while the engine is stopped): other
    processes' growth since the launch is not memory the engine failed to give back."""
    engine_log_lines_total: int | None = None
    """Log lines this run wrote that show progress (wait-loop lines left out)."""
    engine_cpu_seconds_total: float | None = None
    """CPU seconds (user + system) of the run's live process tree: progress while starting."""
    engine_progress_s: float | None = None
    """Monotonic time of the last tick a starting run showed work
    (``agent_supervisor.telemetry.progress``); kept by the sensors across the whole start, which
    can outlast the window."""
    engine_leftover_pids: tuple[int, ...] | None = None
    """Live processes of the run's process group once the launcher no longer runs it
    (CRASHED, STOPPED); () when none is left, None when not looked at."""
    engine_leftover_stuck_pids: tuple[int, ...] | None = None
    """Those of them in uninterruptible sleep (state D: stuck in a driver call)."""
    engine_leftover_rss_bytes: int | None = None
    engine_leftover_roles: tuple[str, ...] | None = None
    """The process titles of the leftovers (``VLLM::EngineCore``, ``VLLM::Worker``...)."""
    gpu_lost: bool | None = None
    """NVML answered NVML_ERROR_GPU_IS_LOST this tick (``agent_supervisor.sense.gpu``)."""
    engine_log_lines: tuple[str, ...] = ()
    """The engine's new log lines this tick (bounded), kept so replay re-classifies them."""
    kernel_lines: tuple[str, ...] = ()
    """The kernel messages the follower classified this tick, raw, for the same reason."""

    # Load the gateway reports (None until a gateway runs).
    gateway_requests_in_flight: int | None = None
    gateway_requests_queued: int | None = None
    gateway_prompt_tokens_in_flight: int | None = None
    gateway_prompt_tokens_queued: int | None = None
    gateway_repeated_prefix_tokens_total: int | None = None
    """Prompt tokens of requests whose prefix the gateway saw in an earlier request (a
    multi-turn agent resending its conversation): what the prefix cache should hit."""
    gateway_parser_errors_total: int | None = None
    """Responses the gateway saw end badly while the engine was fine: tool-call or
    reasoning parser errors, ``content: null`` with ``finish_reason: stop``, a 5xx on one
    request (vllm #46464). Counted per agent key at the gateway; summed here."""
    gateway_degenerate_streams_total: int | None = None
    """Answers the gateway saw end in one short unit repeated for hundreds of tokens
    that the prompt did not ask for (token 0 after NaN logits: vllm #55766)."""
    gateway_overrun_answers_total: int | None = None
    """Answers the gateway counted clearly past their request's ``max_tokens`` (streams
    among them ended there: llama-server after a context shift, llama.cpp #25026)."""

    # An engine across boxes (``engine.nodes``): each worker node as the head heard of it.
    nodes: tuple[NodeSample, ...] | None = None
    """One per worker node (``agent_supervisor.telemetry.node_sample``); None: one box."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping of every field (``None`` kept, state as its string)."""
        out = dataclasses.asdict(self)
        if self.engine_state is not None:
            out["engine_state"] = str(self.engine_state)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        """Inverse of ``to_dict`` (JSON lists become tuples). Unknown keys raise TypeError."""
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in data.items()}
        if values.get("engine_state") is not None:
            values["engine_state"] = EngineState(values["engine_state"])
        if values.get("nodes") is not None:
            values["nodes"] = tuple(NodeSample.from_dict(n) for n in values["nodes"])
        return cls(**values)

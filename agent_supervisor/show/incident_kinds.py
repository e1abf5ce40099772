"""Every (kind, severity) an incident can be recorded with, so that
``supervisor_incidents_total`` carries each one at 0 from the first scrape.

Why: ``increase()`` and ``rate()`` need two samples of a series; a counter series born at 1
(the first incident of its kind) shows no increase, so the first hang of a life, or the
first memory floor kill, would neither fire its alert nor mark the dashboard's incidents
annotation (issue 33; prometheus.io, "Instrumentation: avoid missing metrics").

The kinds come from the guards' findings (``decide/guards/``), the crash reasons
(``states.CrashReason``), the actions of a decision without findings
(``decide.decision.Action``, severity ``info``) and the incidents the service writes itself
(start-up, reloads, upkeep, the gateway's resumptions). A test
(tests/unit/test_incident_kinds.py) reads every literal kind and severity in the
package's code and fails on one missing here.
"""

from __future__ import annotations

from agent_supervisor.decide.decision import Action
from agent_supervisor.states import CrashReason

__all__ = ["KNOWN_INCIDENTS"]

_LISTED: dict[str, tuple[str, ...]] = {
    # The guards' findings (decide/guards/), by severity.
    "emergency": ("gpu_lost_reboot_required", "memory_floor", "node_memory_floor",
                  "nv_err_no_memory"),
    "critical": ("corrupted_output", "engine_admission_stall", "engine_bad_argument",
                 "engine_container_refused", "engine_hung", "engine_model_not_found",
                 "engine_nccl_init_failed",
                 "engine_model_files_corrupt", "engine_checkpoint_incompatible",
                 "engine_driver_mismatch", "engine_compile_cache_corrupt", "engine_nccl_fabric",
                 "gpu_wedged_reboot_required", "memory_pinned_reboot_required",
                 "node_rank_exited", "orphan_engine_core", "ranks_wedged", "start_timeout",
                 "startup_cuda_graph_oom", "startup_insufficient_memory",
                 "startup_out_of_memory", "worker_host_froze",
                 # the service's own
                 "engine_stop_timeout", "host_reset", "record_corrupt", "unclean_stop"),
    "warning": ("answer_past_max_tokens", "engine_update_regression",
                "engine_hang_suspected", "gpu_hot", "gpu_throttling", "load_budget",
                "memory_creep", "memory_floor_start_held", "memory_forecast",
                "memory_pressure", "platform_low_power_state", "platform_slow_state",
                "preemption_storm",
                "preemption_storm_recurring", "preflight_failed", "sample_gap_memory",
                "sample_gap_starved", "soc_hot", "spec_acceptance_anomaly",
                "spec_acceptance_drift", "spec_degraded", "spec_launch_lottery",
                "spec_prefix_cache_defeated", "spec_slower_than_plain",
                "spec_structured_output", "telemetry_degraded",
                # the service's own
                "adopt_ambiguous", "adopted_engine_stopped",
                "gateway_policy_refused", "host_reset", "kernel_log_unreadable",
                "orphaned_engine", "policy_rejected",
                "retention_held", "stream_resumed", "unclean_stop", "failover"),
    "info": ("agent_parser_errors", "engine_leftovers", "memory_not_back", "memory_trend",
             "nv_err_no_memory", "sample_gap", "sigterm_ignored", "top_rung",
             # the service's own
             "adopted_engine_restarted", "adopted_engine_taken_over", "engine_adopted",
             "failover", "policy_reloaded", "stream_resumed", "supervision_mode"),
}

#: (kind, severity) pairs, sorted: the listed ones, every crash reason (critical, the
#: engine-dead guard) and every action but hold (info: a decision without findings, e.g.
#: an operator's step down or a scheduled step up).
KNOWN_INCIDENTS: tuple[tuple[str, str], ...] = tuple(sorted(
    {(kind, severity) for severity, kinds in _LISTED.items() for kind in kinds}
    | {(str(reason), "critical") for reason in CrashReason}
    | {(str(action), "info") for action in Action if action is not Action.HOLD}))

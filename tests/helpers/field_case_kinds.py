"""``KINDS``: the finding kinds the field cases cover (the serving-engine kinds of issue 13)."""

from __future__ import annotations

#: The serving-engine kinds of issue 13 (the edges of the engine's life, issue 12, have
#: their own closed-loop scenarios; their start-up traces are not cadence-free).
KINDS = frozenset({
    "agent_parser_errors", "corrupted_output", "engine_admission_stall",
    "engine_hang_suspected", "engine_hung",
    "exited", "memory_creep", "memory_floor", "memory_floor_start_held",
    "platform_low_power_state", "platform_slow_state", "preemption_storm",
    "preemption_storm_recurring",
    "sample_gap_memory", "sample_gap_starved", "soc_hot", "spec_acceptance_anomaly",
    "spec_acceptance_drift", "spec_degraded",
    "spec_launch_lottery", "spec_prefix_cache_defeated", "spec_slower_than_plain",
    "spec_structured_output", "telemetry_degraded", "engine_update_regression"})

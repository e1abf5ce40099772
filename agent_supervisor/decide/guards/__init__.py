"""One module per guard. Each exposes ``GUARD`` (its name) and ``check(situation) ->
list[Finding]``: pure, thresholds from the policy, evidence in every finding."""

from __future__ import annotations

from agent_supervisor.decide.guards import (
    admission_stall,
    agent_errors,
    answer_overrun,
    corrupted_output,
    engine_dead,
    engine_hung,
    engine_update,
    gpu_lost,
    load_budget,
    memory_floor,
    memory_forecast,
    memory_pressure,
    nodes,
    platform_slow,
    preemption_storm,
    sample_gaps,
    slots_stalled,
    spec_drift,
    speculative,
    startup,
    stop_leftovers,
    telemetry_health,
    thermal,
)

#: Every guard, in the order their findings are reported.
ALL = (gpu_lost, stop_leftovers, startup, engine_dead, memory_floor, nodes, engine_hung,
       slots_stalled, admission_stall, corrupted_output, speculative, spec_drift,
       memory_forecast, memory_pressure, sample_gaps, preemption_storm, thermal,
       platform_slow, load_budget, telemetry_health, agent_errors,
       answer_overrun, engine_update)

__all__ = ["ALL"]

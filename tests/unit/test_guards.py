"""A scenario per guard on hand-written traces, each with its negative controls."""

from __future__ import annotations

import pytest

from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Severity
from agent_supervisor.decide.ladder import LadderState, advance
from agent_supervisor.states import EngineState
from tests.helpers.guards import BASELINES, decoding
from tests.unit.scenario import POLICY, GiB, decide_on, play, samples


def kinds(d):
    return [f.kind for f in d.findings]


# -- engine hung ---------------------------------------------------------------------

def hung_trace(canary_ok=False, running=2.0, **kw):
    # Ready at 0; from 100 s on, requests present and every counter flat.
    busy = samples(0, 99, iteration_tokens_count_total=lambda t: t * 10,
                   prompt_tokens_total=lambda t: t * 50, generation_tokens_total=lambda t: t * 40,
                   requests_running=running, requests_waiting=1.0, health_status=200)
    stuck = samples(100, 175, iteration_tokens_count_total=990.0, prompt_tokens_total=4950.0,
                    generation_tokens_total=3960.0, requests_running=running,
                    requests_waiting=1.0, health_status=200, canary_ok=canary_ok,
                    canary_finished_s=lambda t: 170.0 if t >= 170 else None, **kw)
    return busy + stuck


def test_hung_engine_is_restarted() -> None:
    d = decide_on(hung_trace())
    assert d.action is Action.RESTART
    (f,) = [f for f in d.findings if f.kind == "engine_hung"]
    assert f.severity is Severity.CRITICAL
    assert f.evidence["flat_seconds"] >= 60 and f.evidence["canary_ok"] is False


def test_no_hang_verdict_without_a_failed_canary() -> None:
    assert decide_on(hung_trace(canary_ok=None)).action is Action.HOLD
    assert decide_on(hung_trace(canary_ok=True)).action is Action.HOLD


def test_idle_engine_with_flat_counters_is_not_hung() -> None:
    trace = samples(0, 300, iteration_tokens_count_total=10.0, prompt_tokens_total=5.0,
                    generation_tokens_total=7.0, requests_running=0.0, requests_waiting=0.0,
                    canary_ok=False, canary_finished_s=250.0)
    d = decide_on(trace)
    assert d.action is Action.HOLD and "engine_hung" not in kinds(d)


def test_long_prefill_under_load_with_slow_probes_is_not_hung() -> None:
    # Heavy load: /health takes 3 s, no token for 90 s, but prompt tokens advance
    # (chunked prefill of a long prompt) and the engine steps.
    trace = samples(0, 200, requests_running=4.0, requests_waiting=6.0, health_status=200,
                    health_latency_seconds=3.0, generation_tokens_total=500.0,
                    iteration_tokens_count_total=lambda t: 100 + t // 5,
                    prompt_tokens_total=lambda t: 1000 + 512 * (t // 5),
                    canary_ok=False, canary_finished_s=190.0)
    d = decide_on(trace)
    assert d.action is Action.HOLD and "engine_hung" not in kinds(d)


def test_no_hang_verdict_during_start_up_grace() -> None:
    trace = hung_trace()
    trace = [s.__class__(**{**s.to_dict(), "engine_state": EngineState.READY,
                            "engine_state_since_s": 100.0}) for s in trace]
    assert decide_on(trace).action is Action.HOLD


# -- memory floor --------------------------------------------------------------------

def test_two_samples_under_the_floor_kill_now_one_rung_down() -> None:
    trace = samples(0, 10, mem_available_bytes=8 * GiB) + samples(
        11, 12, mem_available_bytes=int(1.5 * GiB))
    d = decide_on(trace)
    assert (d.action, d.rung) == (Action.KILL_NOW, 1)
    assert d.findings[0].severity is Severity.EMERGENCY
    assert d.findings[0].evidence["mem_available_bytes"] == [int(1.5 * GiB)] * 2


def test_one_low_sample_is_not_enough() -> None:
    trace = samples(0, 10, mem_available_bytes=8 * GiB) + samples(
        11, 11, mem_available_bytes=GiB) + samples(12, 12, mem_available_bytes=8 * GiB)
    assert decide_on(trace).action is Action.HOLD


def test_floor_applies_during_start_up() -> None:
    trace = samples(0, 5, engine_state=EngineState.STARTING, mem_available_bytes=GiB)
    assert decide_on(trace).action is Action.KILL_NOW


def test_nv_err_no_memory_with_memory_low_kills_now() -> None:
    trace = samples(0, 5, mem_available_bytes=3 * GiB) + samples(
        6, 6, mem_available_bytes=3 * GiB, kernel_events=("nv_err_no_memory",))
    d = decide_on(trace)
    assert d.action is Action.KILL_NOW and d.findings[0].kind == "nv_err_no_memory"


def test_nv_err_no_memory_with_plenty_of_memory_is_only_recorded() -> None:
    # Healthy starts print the line too (vllm #56824).
    trace = samples(0, 5, mem_available_bytes=20 * GiB) + samples(
        6, 6, mem_available_bytes=20 * GiB, kernel_events=("nv_err_no_memory",))
    d = decide_on(trace)
    assert d.action is Action.HOLD
    assert [(f.kind, f.severity) for f in d.findings] == [("nv_err_no_memory", Severity.INFO)]


def test_stopped_engine_is_not_started_while_memory_is_at_the_floor() -> None:
    trace = samples(0, 3, engine_state=EngineState.STOPPED, mem_available_bytes=GiB,
                    run=None)
    d = decide_on(trace)
    assert d.action is Action.HOLD
    assert d.explanation.startswith("engine stopped: start of mode mtp2 held: MemAvailable "
                                    "1.00 GiB under the floor of 2.00 GiB with no engine "
                                    "running: something else holds the memory")
    (f,) = [f for f in d.findings if f.kind == "memory_floor_start_held"]
    assert f.severity is Severity.WARNING and f.evidence["resume_at_bytes"] == 3 * GiB


def floor_kill_then_stopped(avail_after: int, *, event_tick_s: float = 0.2):
    """Killed by the floor at 11 s; the stopped state read ``event_tick_s`` later (the
    launcher's event tick) and then every second, at ``avail_after``; a co-tenant's RSS
    grew 20 GiB since the launch."""
    run = samples(0, 10, mem_available_bytes=8 * GiB) + samples(
        10.5, 11, dt=0.5, mem_available_bytes=GiB)
    stop = 11 + event_tick_s
    after = samples(stop, stop + 20, engine_state=EngineState.STOPPED,
                    engine_state_since_s=stop, mem_available_bytes=avail_after,
                    processes_rss_bytes=30 * GiB, processes_rss_before_launch_bytes=10 * GiB)
    return run + after


def test_floor_kill_with_the_memory_still_held_holds_every_start() -> None:
    """Before: the event tick 0.2 s after the kill saw one reading of the dip (two
    readings 0.2 s apart count as one) and started the next engine, which the floor killed
    again, rung after rung."""
    decisions, ladder = play(floor_kill_then_stopped(GiB), LadderState(0))
    acts = [d.action for d in decisions if d.action is not Action.HOLD]
    assert acts == [Action.KILL_NOW] and ladder.rung == 1
    held = decisions[-1]
    assert "other processes grew by 20.0 GiB since the last launch" in held.explanation
    assert "the start waits until MemAvailable is over 3.00 GiB" in held.explanation


def test_after_a_floor_kill_the_start_waits_for_the_margin_above_the_floor() -> None:
    just_over = decide_on(floor_kill_then_stopped(int(2.5 * GiB)), LadderState(1))
    assert just_over.action is Action.HOLD
    assert "not yet past its 1.0 GiB margin" in just_over.explanation
    clear = decide_on(floor_kill_then_stopped(int(3.5 * GiB)), LadderState(1))
    assert (clear.action, clear.rung) == (Action.START, 1)


def test_a_stopped_engine_with_memory_just_over_the_floor_all_along_is_started() -> None:
    # Never under the floor: the margin is hysteresis, not a second floor.
    trace = samples(0, 5, engine_state=EngineState.STOPPED, run=None,
                    mem_available_bytes=int(2.5 * GiB))
    assert decide_on(trace).action is Action.START


# -- memory forecast -----------------------------------------------------------------

def test_memory_falling_to_the_floor_within_the_horizon_steps_down() -> None:
    # 12 GiB falling 30 MiB/s from 200 s: floor (2 GiB) in ~5 min.
    trace = samples(0, 400, mem_available_bytes=lambda t: int(
        12 * GiB - max(0, t - 200) * 30 * 2**20))
    d = decide_on(trace)
    assert d.action is Action.STEP_DOWN and d.findings[0].kind == "memory_forecast"
    assert d.findings[0].evidence["seconds_to_floor"] <= 300


def test_slow_creep_over_days_is_not_acted_on() -> None:
    # 1 MiB per minute: the floor is a week away.
    trace = samples(0, 900, mem_available_bytes=lambda t: int(12 * GiB - t / 60 * 2**20))
    d = decide_on(trace)
    assert d.action is Action.HOLD and d.findings == ()


def test_creep_within_a_day_is_recorded_only() -> None:
    trace = samples(0, 900, mem_available_bytes=lambda t: int(12 * GiB - t * 0.2 * 2**20))
    d = decide_on(trace)
    assert d.action is Action.HOLD and kinds(d) == ["memory_trend"]


def test_start_up_allocation_is_not_a_trend() -> None:
    # Ready at 0, the KV cache and graphs take 10 GiB in the first 100 s, then flat.
    trace = samples(0, 160, mem_available_bytes=lambda t: int(
        20 * GiB - min(t, 100) * 0.1 * GiB))
    assert decide_on(trace).action is Action.HOLD


# -- memory pressure -----------------------------------------------------------------

def test_sustained_psi_full_steps_down() -> None:
    trace = samples(0, 60, psi_memory_full_avg10_ratio=lambda t: 0.3 if t > 20 else 0.0)
    d = decide_on(trace)
    assert d.action is Action.STEP_DOWN and d.findings[0].kind == "memory_pressure"


def test_short_psi_spike_is_not_acted_on() -> None:
    trace = samples(0, 60, psi_memory_full_avg10_ratio=lambda t: 0.3 if t > 45 else 0.0)
    assert decide_on(trace).action is Action.HOLD


# -- preemption storm ----------------------------------------------------------------

def storm_trace(rung: int = 0):
    return samples(0, 240, rung=rung, requests_running=4.0, requests_waiting=3.0,
                   preemptions_total=lambda t: max(0.0, t - 120) * 2,
                   generation_tokens_total=lambda t: t * 100 if t <= 120
                   else 12000 + (t - 120) * 30)


def test_preemption_storm_sheds_then_steps_down_to_fewer_sequences() -> None:
    first = decide_on(storm_trace())
    assert (first.action, first.shed) == (Action.SHED, True)
    assert first.findings[0].kind == "preemption_storm"
    assert first.findings[0].severity is Severity.WARNING
    # Still storming long after the shed: mtp2 and mtp1 run vLLM's default number of
    # sequences, so the step goes past mtp1 to nospec (--max-num-seqs 4).
    shed_long_ago = LadderState(0, since_s=0, shed=True, shed_since_s=-200.0)
    second = decide_on(storm_trace(), shed_long_ago)
    assert (second.action, second.rung) == (Action.STEP_DOWN, 2)
    from_nospec = decide_on(storm_trace(rung=2),
                            LadderState(2, since_s=0, shed=True, shed_since_s=-200.0))
    assert (from_nospec.action, from_nospec.rung) == (Action.STEP_DOWN, 3)


def test_a_storm_back_after_its_shed_was_restored_steps_down_without_shedding() -> None:
    """Before: shed, restored after the cooldown, shed again when the storm came back,
    forever; the storm had one rung with fewer sequences to go to all along."""
    restored = LadderState(0, since_s=0, last_sheds_s=(("preemption_storm", -600.0),))
    d = decide_on(storm_trace(), restored)
    assert (d.action, d.rung) == (Action.STEP_DOWN, 2)
    (f,) = [f for f in d.findings if f.kind == "preemption_storm_recurring"]
    assert f.evidence["last_shed_seconds_ago"] == 840.0
    assert "back 840 s after the shed for the last one (within 1800 s): shedding did not " \
        "cure it -> step down to nospec" in d.explanation
    # Held by the cooldown of a recent change: shed meanwhile, the step comes after.
    cooling = LadderState(0, since_s=0, last_sheds_s=(("preemption_storm", -600.0),),
                          last_change_s=100.0)
    held = decide_on(storm_trace(), cooling)
    assert (held.action, held.shed) == (Action.SHED, True)
    assert "the step down is held by cooldown" in held.explanation
    # A shed past recur_seconds (30 min) is another storm: shed first again.
    long_ago = LadderState(0, since_s=0, last_sheds_s=(("preemption_storm", -2000.0),))
    again = decide_on(storm_trace(), long_ago)
    assert (again.action, again.findings[0].kind) == (Action.SHED, "preemption_storm")


def test_the_ladder_remembers_a_shed_per_kind_until_the_rung_changes() -> None:
    decisions, ladder = play(storm_trace(), LadderState(0, since_s=0))
    sheds = [d for d in decisions if d.action is Action.SHED]
    assert len(sheds) == 1 and ladder.last_shed("preemption_storm") == 133.0   # its time
    moved = advance(ladder, Decision(Action.STEP_DOWN, 2, "x"), POLICY, 500.0)
    assert moved.last_sheds_s == () and moved.last_shed("preemption_storm") is None


def test_kv_at_96_percent_without_preemptions_is_normal() -> None:
    trace = samples(0, 240, rung=2, requests_running=4.0, requests_waiting=2.0,
                    kv_cache_usage_ratio=0.96, preemptions_total=0.0,
                    generation_tokens_total=lambda t: t * 100,
                    prompt_tokens_total=lambda t: t * 300,
                    iteration_tokens_count_total=lambda t: t * 20)
    d = decide_on(trace)
    assert d.action is Action.HOLD and d.findings == ()


# -- thermal -------------------------------------------------------------------------

def test_hot_gpu_sheds_first_then_steps_down() -> None:
    trace = samples(0, 100, gpu_temperature_c=lambda t: 91.0 if t >= 30 else 70.0)
    first = decide_on(trace)
    assert (first.action, first.shed) == (Action.SHED, True)
    second = decide_on(trace, LadderState(0, since_s=0, shed=True))
    assert second.action is Action.STEP_DOWN and second.findings[0].kind == "gpu_hot"


def test_thermal_throttling_sheds() -> None:
    trace = samples(0, 60, gpu_clock_event_reasons=("sw_power_cap", "hw_thermal_slowdown"))
    d = decide_on(trace)
    assert d.action is Action.SHED and d.findings[0].evidence["reasons"] == [
        "hw_thermal_slowdown"]


def test_power_cap_alone_is_routine() -> None:
    trace = samples(0, 60, gpu_clock_event_reasons=("sw_power_cap",), gpu_temperature_c=80.0)
    assert decide_on(trace).findings == ()


# -- speculative decoding ------------------------------------------------------------

def test_crash_with_an_illegal_memory_access_skips_speculation() -> None:
    trace = samples(0, 10, engine_log_tags=lambda t: ("cuda_illegal_memory_access",)
                    if t == 9 else ()) + samples(
        11, 11, engine_state=EngineState.CRASHED, engine_crash_reason="exited",
        engine_exit_code=0)
    d = decide_on(trace)
    assert (d.action, d.rung) == (Action.STEP_DOWN, 2)    # nospec, not mtp1
    assert d.findings[0].evidence["speculative_signatures"] == ["cuda_illegal_memory_access"]


def test_xid_31_with_speculation_on_skips_speculation() -> None:
    trace = samples(0, 5, kernel_events=lambda t: ("xid:31",) if t == 4 else ()) + samples(
        6, 6, engine_state=EngineState.CRASHED, engine_crash_reason="exited")
    assert (decide_on(trace).rung) == 2


def test_same_crash_without_speculation_just_restarts() -> None:
    trace = samples(0, 10, rung=2, engine_log_tags=("cuda_illegal_memory_access",)) + samples(
        11, 11, rung=2, engine_state=EngineState.CRASHED, engine_crash_reason="exited")
    d = decide_on(trace, LadderState(2))
    assert (d.action, d.rung) == (Action.RESTART, 2)


def spec_counters(p0_rate, t_jump=None):
    """k=8 drafts at 10/s; position 0 accepted at p0_rate, the others at 0.6 (every
    position 1.0 after t_jump: the whole draft accepted, vllm #40756)."""
    def pos(rate):
        def value(t):
            if t_jump is None or t <= t_jump:
                return 10 * t * rate
            return 10 * t_jump * rate + 10 * (t - t_jump)
        return value
    p0, rest = pos(p0_rate), pos(0.6)
    return {"spec_decode_num_drafts_total": lambda t: 10.0 * t,
            "spec_decode_num_draft_tokens_total": lambda t: 80.0 * t,
            "spec_decode_num_accepted_tokens_total": lambda t: 80.0 * t * 0.44,
            "spec_decode_accepted_per_position_total": lambda t: (p0(t),) + (rest(t),) * 7,
            "requests_running": 4.0}


def test_acceptance_anomaly_to_100_percent_is_a_warning_on_record() -> None:
    trace = samples(0, 600, **spec_counters(0.76, t_jump=580))
    d = decide_on(trace)
    assert d.action is Action.HOLD          # a precursor: recorded, not acted on
    (f,) = d.findings
    assert (f.kind, f.severity) == ("spec_acceptance_anomaly", Severity.WARNING)
    assert f.evidence["mean_acceptance_length"] == pytest.approx(9.0)
    assert f.evidence["drafts"] >= 50


def test_overall_044_at_k8_with_position0_076_is_not_an_anomaly() -> None:
    trace = samples(0, 600, **spec_counters(0.76))
    d = decide_on(trace)
    assert d.action is Action.HOLD and d.findings == ()


def test_speculation_slower_than_plain_waits_for_calm_then_steps_to_nospec() -> None:
    busy = samples(0, 200, **decoding(150.0))
    d = decide_on(busy, baselines=BASELINES)
    assert d.action is Action.HOLD and "deferred to a calm moment" in d.explanation
    f = d.findings[0]
    assert f.kind == "spec_slower_than_plain" and f.evidence["baseline_concurrency"] == 4.0
    assert f.evidence["tokens_per_second_per_request"] == pytest.approx(150.0)
    calm = busy[:-1] + samples(200, 200, **decoding(150.0, running=1.0))
    d = decide_on(calm, baselines=BASELINES)
    assert (d.action, d.rung) == (Action.STEP_DOWN, 2)


def test_no_baseline_no_verdict_on_speed() -> None:
    assert decide_on(samples(0, 200, **decoding(150.0))).findings == ()


def test_speculation_faster_than_plain_is_fine() -> None:
    busy = samples(0, 200, **decoding(1500.0, running=1.0))
    assert decide_on(busy, baselines=BASELINES).findings == ()


def test_too_few_finished_requests_give_no_verdict() -> None:
    trace = samples(0, 200, requests_running=4.0, request_tpot_count_total=2.0,
                    request_tpot_sum_seconds_total=0.1)
    assert decide_on(trace, baselines=BASELINES).findings == ()


# -- load budget ---------------------------------------------------------------------

def test_too_many_tokens_in_flight_sheds() -> None:
    trace = samples(0, 20, rung=3, gateway_prompt_tokens_in_flight=6000,
                    gateway_requests_in_flight=3)
    d = decide_on(trace, LadderState(3))
    assert (d.action, d.shed) == (Action.SHED, True)
    assert d.findings[0].evidence["max_tokens_in_flight"] == 4000


def test_no_gateway_no_budget_verdict() -> None:
    assert decide_on(samples(0, 20, rung=3), LadderState(3)).findings == ()


def test_hang_seen_through_the_gateway_when_vllm_gauges_read_zero() -> None:
    # On the CPU engine the running gauge reads 0 at most ticks and freezes when the
    # EngineCore is stopped; the gateway knows its 3 requests are in flight.
    busy = samples(0, 99, iteration_tokens_count_total=lambda t: t * 10 + 5,
                   prompt_tokens_total=lambda t: t * 50, generation_tokens_total=lambda t: t * 40,
                   requests_running=0.0, requests_waiting=0.0, gateway_requests_in_flight=3)
    stuck = samples(100, 175, iteration_tokens_count_total=999.0, prompt_tokens_total=4950.0,
                    generation_tokens_total=3960.0, requests_running=0.0, requests_waiting=0.0,
                    gateway_requests_in_flight=3, canary_ok=False,
                    canary_finished_s=lambda t: 170.0 if t >= 170 else None)
    d = decide_on(busy + stuck)
    assert d.action is Action.RESTART and d.findings[0].kind == "engine_hung"
    assert d.findings[0].evidence["gateway_requests_in_flight"] == 3
    no_gateway = [s.__class__(**{**s.to_dict(), "gateway_requests_in_flight": None,
                                 "engine_state": s.engine_state}) for s in busy + stuck]
    assert decide_on(no_gateway).action is Action.HOLD      # gauges say idle: no verdict


def test_a_hang_right_after_an_idle_spell_is_still_found() -> None:
    # Idle (flat counters, nothing in flight) for a minute, then requests arrive and the
    # engine never steps again: the idle spell must not hide the hang.
    idle = samples(0, 120, iteration_tokens_count_total=500.0, prompt_tokens_total=900.0,
                   generation_tokens_total=700.0, requests_running=0.0, requests_waiting=0.0)
    stuck = samples(121, 200, iteration_tokens_count_total=500.0, prompt_tokens_total=900.0,
                    generation_tokens_total=700.0, requests_running=0.0, requests_waiting=0.0,
                    gateway_requests_in_flight=4, canary_ok=False,
                    canary_finished_s=lambda t: 190.0 if t >= 190 else None)
    d = decide_on(idle + stuck)
    assert d.action is Action.RESTART and d.findings[0].evidence["flat_seconds"] >= 60
    assert decide_on(idle + stuck[:40]).action is Action.HOLD     # loaded 40 s < 60 s


def test_two_floor_readings_milliseconds_apart_count_once() -> None:
    trace = samples(0, 10, mem_available_bytes=8 * GiB) + samples(
        11, 11, mem_available_bytes=GiB) + samples(11.02, 11.02, mem_available_bytes=GiB)
    assert decide_on(trace).action is Action.HOLD
    assert decide_on(trace + samples(12, 12, mem_available_bytes=GiB)).action is Action.KILL_NOW


def test_health_503_twice_means_the_engine_is_dead() -> None:
    once = samples(0, 5, health_status=200) + samples(6, 6, health_status=503)
    assert decide_on(once).action is Action.HOLD
    twice = once + samples(7, 7, health_status=503)
    d = decide_on(twice)
    assert d.action is Action.RESTART and d.findings[0].kind == "engine_core_died"


def test_stale_metrics_are_not_a_stall() -> None:
    # Counters rise until 100 s, then /metrics stops answering: unknown, not flat.
    moving = samples(0, 100, iteration_tokens_count_total=lambda t: t * 10,
                     prompt_tokens_total=lambda t: t * 50,
                     generation_tokens_total=lambda t: t * 40, gateway_requests_in_flight=4)
    silent = samples(101, 200, gateway_requests_in_flight=4, canary_ok=False,
                     canary_finished_s=lambda t: 150.0 if t >= 150 else None)
    assert decide_on(moving + silent).action is Action.HOLD


def test_a_deferred_speed_step_does_not_hold_back_a_memory_warning() -> None:
    trace = samples(0, 400, **decoding(150.0), mem_available_bytes=lambda t: int(
        12 * GiB - max(0, t - 200) * 30 * 2**20))
    d = decide_on(trace, baselines=BASELINES)
    assert {f.kind for f in d.findings} == {"spec_slower_than_plain", "memory_forecast"}
    assert d.action is Action.STEP_DOWN and d.explanation.startswith("MemAvailable falling")


def test_shed_first_waits_before_stepping_down() -> None:
    trace = samples(0, 100, gpu_temperature_c=lambda t: 91.0 if t >= 30 else 70.0)
    just_shed = LadderState(0, since_s=0, shed=True, shed_since_s=95.0)
    d = decide_on(trace, just_shed)
    assert d.action is Action.HOLD and "load shed 5 s ago" in d.explanation
    long_ago = LadderState(0, since_s=0, shed=True, shed_since_s=-30.0)
    assert decide_on(trace, long_ago).action is Action.STEP_DOWN

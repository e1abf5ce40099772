"""The ladder's hysteresis: cooldown, transitions per hour, calm before stepping up,
probation, barred rungs with backoff, allowed hours, operator pin and pause."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.ladder import LadderState, advance, pause, pin, resume
from agent_supervisor.policy import load_policy
from tests.unit.scenario import POLICY, POLICY_YAML, decide_on, play, samples


def pressure(t0, t1, on=True, **kw):
    return samples(t0, t1, psi_memory_full_avg10_ratio=0.5 if on else 0.0, **kw)


def test_cooldown_holds_a_second_step_down() -> None:
    ladder = LadderState(1, since_s=0, last_change_s=100.0, transitions_s=(100.0,))
    d = decide_on(pressure(100, 200, rung=1), ladder)
    assert d.action is Action.HOLD
    assert "would step down to nospec, held by cooldown (200 s left of 300 s)" in d.explanation
    later = decide_on(pressure(300, 420, rung=1), ladder)
    assert (later.action, later.rung) == (Action.STEP_DOWN, 2)


def test_transitions_per_hour_are_capped() -> None:
    ladder = LadderState(1, since_s=0, last_change_s=1000.0,
                         transitions_s=(100.0, 500.0, 1000.0))
    d = decide_on(pressure(1400, 1500, rung=1), ladder)
    assert d.action is Action.HOLD and "3 transitions in the last hour" in d.explanation


def test_step_up_only_after_calm_one_rung_at_a_time_with_probation() -> None:
    ladder = LadderState(2, since_s=0, last_change_s=0.0)
    assert decide_on(pressure(0, 500, on=False, rung=2), ladder).action is Action.HOLD
    d = decide_on(pressure(0, 700, on=False, rung=2), ladder)
    assert (d.action, d.rung) == (Action.STEP_UP, 1)
    assert "on probation for 300 s" in d.explanation
    after = advance(ladder, d, POLICY, 700.0)
    # Issue 29: the probation counts from the new engine's first serving, not from here.
    assert after.rung == 1 and after.probation_until_s is None
    assert after.probation_pending_since_s == 700.0 and after.in_probation(5000.0)
    serving = samples(760, 770, rung=1, ready_since=760.0)
    d = decide_on(serving, after)
    assert d.probation_from_s == 760.0
    assert advance(after, d, POLICY, 770.0).probation_until_s == 760.0 + 300.0


def test_failure_during_probation_goes_back_and_bars_the_rung() -> None:
    ladder = LadderState(1, since_s=0, last_change_s=700.0, transitions_s=(700.0,),
                         probation_until_s=1000.0)
    d = decide_on(pressure(700, 800, rung=1), ladder)
    assert (d.action, d.rung, d.marks_failing) == (Action.STEP_DOWN, 2, 1)
    barred = advance(ladder, d, POLICY, 800.0)
    assert barred.failing_until(1) == 800.0 + 3600.0
    # Calm again, but mtp1 stays barred until its backoff ends.
    calm = pressure(800, 2000, on=False, rung=2)
    assert decide_on(calm, barred).action is Action.HOLD
    late = pressure(4300, 4500, on=False, rung=2)
    assert (decide_on(late, barred).action, decide_on(late, barred).rung) == (Action.STEP_UP, 1)
    # A second failure doubles the backoff.
    again = advance(barred, dataclasses.replace(d, rung=2), POLICY, 5000.0)
    assert again.failing_until(1) == 5000.0 + 7200.0


def test_crash_during_probation_also_goes_back() -> None:
    from agent_supervisor.states import EngineState

    ladder = LadderState(1, since_s=0, last_change_s=700.0, probation_until_s=1000.0)
    trace = samples(700, 720, rung=1) + samples(721, 721, rung=1,
                                                 engine_state=EngineState.CRASHED,
                                                 engine_crash_reason="exited")
    d = decide_on(trace, ladder)
    assert (d.action, d.rung, d.marks_failing) == (Action.STEP_DOWN, 2, 1)


def test_step_up_only_inside_the_allowed_hours() -> None:
    policy = load_policy(POLICY_YAML.replace(
        "max_transitions_per_hour: 3}",
        "max_transitions_per_hour: 3, step_up_windows: ['22:00-06:00'],"
        " timezone: Europe/Paris}"))
    ladder = LadderState(2, since_s=0)
    noon = datetime(2026, 11, 29, 11, 0, tzinfo=UTC).timestamp()     # 12:00 in Paris
    night = datetime(2026, 11, 29, 23, 30, tzinfo=UTC).timestamp()   # 00:30 in Paris
    day = samples(0, 700, rung=2, wall_s=lambda t: noon + t)
    assert decide_on(day, ladder, policy).action is Action.HOLD
    nite = samples(0, 700, rung=2, wall_s=lambda t: night + t)
    assert decide_on(nite, ladder, policy).action is Action.STEP_UP


def test_pin_moves_to_the_pinned_mode_and_stops_automatic_steps() -> None:
    ladder = pin(LadderState(0, since_s=0), 2)
    d = decide_on(samples(0, 10), ladder)
    assert (d.action, d.rung) == (Action.STEP_DOWN, 2) and "pinned by the operator" in d.explanation
    there = dataclasses.replace(ladder, rung=2)
    held = decide_on(pressure(0, 60, rung=2), there)
    assert held.action is Action.HOLD and "pinned by the operator" in held.explanation
    assert decide_on(samples(0, 2000, rung=2), there).action is Action.HOLD   # no step up


def test_pause_holds_warnings_but_not_emergencies() -> None:
    paused = pause(LadderState(0, since_s=0))
    assert decide_on(pressure(0, 60), paused).action is Action.HOLD
    low = samples(0, 2, mem_available_bytes=1024**3)
    assert decide_on(low, paused).action is Action.KILL_NOW
    assert resume(paused).paused is False


def test_shed_is_lifted_after_a_calm_cooldown() -> None:
    ladder = LadderState(0, since_s=0, shed=True, last_trouble_s=100.0)
    assert decide_on(samples(100, 300), ladder).action is Action.HOLD
    d = decide_on(samples(100, 401), ladder)
    assert (d.action, d.shed) == (Action.SHED, False)


def test_a_whole_day_of_calm_then_pressure_does_not_flap() -> None:
    # Pressure comes and goes every 2 minutes for an hour: at most 3 transitions.
    trace = samples(0, 3600, psi_memory_full_avg10_ratio=lambda t: 0.5 if (t // 120) % 2 else 0.0)
    decisions, _ = play(trace, LadderState(0, since_s=0))
    moves = [d for d in decisions if d.action in (Action.STEP_DOWN, Action.STEP_UP)]
    assert 1 <= len(moves) <= 3

"""Invariants of decide() + advance() over random sequences of engine states."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.ladder import LadderState, advance
from agent_supervisor.policy import load_policy
from agent_supervisor.states import CrashReason, EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

POLICY = load_policy("""
fleet: t
engine: {executable: vllm}
modes: [{name: a}, {name: b}, {name: c}]
restart: {start_limit_burst: 2, start_limit_interval_seconds: 100}
""")

event = st.tuples(
    st.floats(min_value=0.01, max_value=50),           # time since the previous sample
    st.sampled_from(list(EngineState)),
    st.sampled_from([None, *[str(r) for r in CrashReason]]),
    st.booleans(),                                     # a new engine run id?
    st.sampled_from([True, False, None]),              # engine_core_alive
)


def play(events):
    window, ladder, t, run = Window(), LadderState.initial(POLICY), 0.0, 0
    out = []
    for dt, state, reason, new_run, core in events:
        t += dt
        run += int(new_run)
        window.append(Sample(t_s=t, engine_state=state, engine_run_id=f"r{run}",
                             engine_rung=ladder.rung, engine_crash_reason=reason,
                             engine_core_alive=core))
        d = decide(window, ladder, POLICY, t)
        out.append((t, d, ladder))
        ladder = advance(ladder, d, POLICY, t)
    return out, ladder


@settings(max_examples=300)
@given(st.lists(event, max_size=60))
def test_invariants(events) -> None:
    out, final = play(events)
    acted_on = [d.run_id for _, d, _ in out if d.action in
                (Action.RESTART, Action.STEP_DOWN, Action.GIVE_UP)]
    # One crash of one run is acted on once.
    assert len(acted_on) == len(set(acted_on))
    for t, d, ladder in out:
        # Rungs only go down, one at a time, and stay on the ladder.
        assert 0 <= d.rung < len(POLICY.modes)
        if d.action is Action.STEP_DOWN:
            assert d.rung == ladder.rung + 1
        # Nothing starts before its backoff, nor after giving up.
        if d.action is Action.START:
            assert not ladder.gave_up and t >= ladder.start_not_before_s
        # Never more crashes than the start limit on one rung within the interval.
        recent = [c for c in ladder.crash_times_s if t - c <= 100]
        assert len(recent) < POLICY.restart.start_limit_burst
        assert d.explanation
    assert final.rung < len(POLICY.modes)


@given(st.lists(event, max_size=30))
def test_deterministic(events) -> None:
    assert play(events) == play(events)

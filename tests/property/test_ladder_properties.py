"""Invariants of decide() + advance() on random traces of every signal the guards read:
graceful transitions never exceed the hourly limit, no step up in a cooldown or onto a
barred rung, the same input always gives the same decisions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.findings import Severity
from agent_supervisor.decide.ladder import HOUR, LadderState, advance
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window
from tests.unit.scenario import POLICY, GiB

GRACEFUL = (Action.STEP_DOWN, Action.STEP_UP)

tick = st.fixed_dictionaries({
    "dt": st.sampled_from([1.0, 5.0, 30.0, 120.0]),
    "state": st.sampled_from([EngineState.READY] * 6 + list(EngineState)),
    "new_run": st.booleans(),
    "mem": st.sampled_from([None, GiB, 3 * GiB, 10 * GiB, 40 * GiB]),
    "psi": st.sampled_from([None, 0.0, 0.05, 0.5]),
    "temp": st.sampled_from([None, 60.0, 95.0]),
    "running": st.sampled_from([None, 0.0, 2.0]),
    "waiting": st.sampled_from([None, 0.0, 3.0]),
    "progress": st.booleans(),
    "preempt": st.booleans(),
    "canary": st.sampled_from([None, True, False]),
    "kernel": st.sampled_from([(), ("xid:31",), ("nv_err_no_memory",)]),
})


def play(ticks):
    window, ladder = Window(3600), LadderState.initial(POLICY, 0.0)
    t, run, counters = 0.0, 0, 0.0
    out = []
    for k in ticks:
        t += k["dt"]
        run += int(k["new_run"])
        counters += 10.0 if k["progress"] else 0.0
        s = Sample(t_s=t, engine_state=k["state"], engine_state_since_s=0.0,
                   engine_run_id=f"r{run}", engine_rung=ladder.rung,
                   engine_crash_reason="exited" if k["state"] is EngineState.CRASHED else None,
                   mem_available_bytes=k["mem"], psi_memory_full_avg10_ratio=k["psi"],
                   gpu_temperature_c=k["temp"], requests_running=k["running"],
                   requests_waiting=k["waiting"], iteration_tokens_count_total=counters,
                   prompt_tokens_total=counters, generation_tokens_total=counters,
                   preemptions_total=t if k["preempt"] else 0.0, canary_ok=k["canary"],
                   canary_finished_s=t if k["canary"] is not None else None,
                   kernel_events=k["kernel"])
        window.append(s)
        d = decide(window, ladder, POLICY, t)
        out.append((t, d, ladder))
        ladder = advance(ladder, d, POLICY, t)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(tick, max_size=80))
def test_hysteresis_invariants(ticks) -> None:
    hy = POLICY.hysteresis
    graceful_times: list[float] = []
    for t, d, ladder in play(ticks):
        assert 0 <= d.rung < len(POLICY.modes)
        warning_driven = d.action in GRACEFUL and all(
            f.severity.rank <= Severity.WARNING.rank for f in d.findings)
        if warning_driven and d.rung != ladder.rung:
            graceful_times.append(t)
            in_hour = [x for x in graceful_times if t - x < HOUR]
            assert len(in_hour) <= hy.max_transitions_per_hour
        if d.action is Action.STEP_UP:
            assert d.rung == ladder.rung - 1
            assert ladder.last_change_s is None or t - ladder.last_change_s >= hy.cooldown_seconds
            barred = ladder.failing_until(d.rung)
            assert barred is None or t >= barred
            assert ladder.calm_for(t) >= hy.calm_seconds
        if d.action is Action.STEP_DOWN and d.marks_failing is None and warning_driven \
                and "operator" not in d.explanation:
            assert ladder.last_change_s is None or t - ladder.last_change_s >= hy.cooldown_seconds


@settings(max_examples=50, deadline=None)
@given(st.lists(tick, max_size=40))
def test_same_trace_same_decisions(ticks) -> None:
    assert [d for _, d, _ in play(ticks)] == [d for _, d, _ in play(ticks)]

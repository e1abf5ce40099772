"""decide() and the ladder on hand-written windows: crashes restart, repeat crashes step
down, the last rung gives up, and nothing is acted on twice or without cause."""

from __future__ import annotations

import pytest

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Severity
from agent_supervisor.decide.ladder import LadderState, advance, restart_delay
from agent_supervisor.policy.load import load_policy
from agent_supervisor.policy.sections import Restart
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

POLICY = load_policy("""
fleet: t
engine: {executable: vllm}
modes: [{name: mtp2}, {name: mtp1}, {name: nospec}]
restart: {restart_delay_seconds: 0, restart_delay_max_seconds: 8, start_limit_burst: 3,
          start_limit_interval_seconds: 600}
""")


def crashed(t: float, run: str, reason: str = "exited", rung: int = 0, code: int | None = 0):
    return Sample(t_s=t, engine_state=EngineState.CRASHED, engine_state_since_s=t,
                  engine_run_id=run, engine_rung=rung, engine_crash_reason=reason,
                  engine_exit_code=code)


def ready(t: float, run: str, core: bool | None = True, rung: int = 0) -> Sample:
    return Sample(t_s=t, engine_state=EngineState.READY, engine_state_since_s=t - 30,
                  engine_run_id=run, engine_rung=rung, engine_core_alive=core,
                  health_status=200 if core is not False else 503)


def stopped(t: float) -> Sample:
    return Sample(t_s=t, engine_state=EngineState.STOPPED, engine_state_since_s=t)


def test_empty_window_holds() -> None:
    d = decide(Window(), LadderState.initial(POLICY), POLICY, 0.0)
    assert d.action is Action.HOLD and d.explanation == "no sample yet"


def test_stopped_engine_is_started_in_the_initial_mode() -> None:
    d = decide(Window.of([stopped(1)]), LadderState.initial(POLICY), POLICY, 1.0)
    assert (d.action, d.rung) == (Action.START, 0)


def test_exit_status_0_is_still_a_crash() -> None:
    d = decide(Window.of([crashed(10, "r1", code=0)]), LadderState(0), POLICY, 10.0)
    assert d.action is Action.RESTART
    assert d.delay_seconds == 0
    (f,) = d.findings
    assert (f.guard, f.kind, f.severity) == ("engine_dead", "exited", Severity.CRITICAL)
    assert f.evidence["exit_code"] == 0
    assert f.evidence["crashes_in_interval"] == 1
    assert "crash 1 of mode mtp2 within 600 s" in d.explanation


def test_engine_core_gone_while_api_server_lives_is_a_crash() -> None:
    d = decide(Window.of([ready(5, "r1", core=False)]), LadderState(0), POLICY, 5.0)
    assert d.action is Action.RESTART
    assert d.findings[0].kind == "engine_core_died"
    assert d.findings[0].evidence["health_status"] == 503


def test_unknown_engine_core_is_not_a_crash() -> None:
    # The in-process engine has no EngineCore child: None means unknown, not dead.
    d = decide(Window.of([ready(5, "r1", core=None)]), LadderState(0), POLICY, 5.0)
    assert d.action is Action.HOLD


def test_a_crash_is_acted_on_once() -> None:
    window = Window.of([crashed(10, "r1")])
    ladder = LadderState(0)
    d = decide(window, ladder, POLICY, 10.0)
    ladder = advance(ladder, d, POLICY, 10.0)
    window.append(crashed(11, "r1"))
    assert decide(window, ladder, POLICY, 11.0).action is Action.HOLD


def run_crashes(times: list[float], ladder: LadderState | None = None):
    ladder = ladder or LadderState(0)
    decisions = []
    for i, t in enumerate(times):
        d = decide(Window.of([crashed(t, f"r{i}", rung=ladder.rung)]), ladder, POLICY, t)
        decisions.append(d)
        ladder = advance(ladder, d, POLICY, t)
    return decisions, ladder


def test_repeated_crashes_back_off_then_step_down() -> None:
    decisions, ladder = run_crashes([0, 5, 20])
    assert [d.action for d in decisions] == [Action.RESTART, Action.RESTART, Action.STEP_DOWN]
    assert [d.delay_seconds for d in decisions[:2]] == [0, 1]
    assert decisions[2].rung == 1
    assert "crash 3 of mode mtp2 within 600 s" in decisions[2].explanation
    assert decisions[2].explanation.endswith("-> step down to mtp1")
    assert ladder.rung == 1 and ladder.crash_times_s == ()


def test_crashes_older_than_the_interval_do_not_count() -> None:
    decisions, ladder = run_crashes([0, 5, 700])
    assert [d.action for d in decisions] == [Action.RESTART] * 3
    assert ladder.rung == 0
    assert decisions[2].findings[0].evidence["crashes_in_interval"] == 1


def test_last_rung_exhausted_gives_up() -> None:
    decisions, ladder = run_crashes([0, 1, 2], LadderState(2))
    assert decisions[-1].action is Action.GIVE_UP
    assert ladder.gave_up
    later = decide(Window.of([stopped(100)]), ladder, POLICY, 100.0)
    assert later.action is Action.HOLD and later.explanation.startswith("gave up")


def test_restart_waits_for_the_backoff() -> None:
    _, ladder = run_crashes([0, 5])          # second crash: 1 s backoff
    early = decide(Window.of([stopped(5.5)]), ladder, POLICY, 5.5)
    assert early.action is Action.HOLD and "due in 0.5 s" in early.explanation
    due = decide(Window.of([stopped(6.0)]), ladder, POLICY, 6.0)
    assert due.action is Action.START


@pytest.mark.parametrize("first, n, expected", [
    (0.0, 1, 0.0), (0.0, 2, 1.0), (0.0, 3, 2.0), (0.0, 6, 16.0), (0.0, 9, 60.0),
    (2.0, 1, 2.0), (2.0, 2, 4.0), (2.0, 3, 8.0),
])
def test_restart_delay_doubles_up_to_the_cap(first: float, n: int, expected: float) -> None:
    rst = Restart(restart_delay_seconds=first, restart_delay_max_seconds=60)
    assert restart_delay(rst, n) == expected


def test_decide_is_pure_same_input_same_output() -> None:
    window = Window.of([ready(1, "a"), crashed(2, "a")])
    ladder = LadderState(0, crash_times_s=(1.5,))
    assert decide(window, ladder, POLICY, 2.0) == decide(window, ladder, POLICY, 2.0)


def test_issue_17_spawns_out_of_resources_are_not_crashes_of_the_mode() -> None:
    """Six spawns failing with EMFILE (a connection flood used up the descriptors) kept
    the ladder where it was and never gave up; three ordinary spawn failures step down."""
    def run(reason: str) -> list[Decision]:
        ladder, window, out = LadderState(2), Window(), []     # the last rung
        for i in range(6):
            t = 10.0 * (i + 1)
            window.append(crashed(t, f"r{i}", reason=reason, rung=2, code=None))
            d = decide(window, ladder, POLICY, t)
            ladder = advance(ladder, d, POLICY, t)
            out.append(d)
        return out
    box = run("spawn_resources")
    assert [d.action for d in box] == [Action.RESTART] * 6
    assert all(d.box_fault and d.rung == 2 and d.delay_seconds == 5.0 for d in box)
    assert "not counted as a crash" in box[0].explanation
    assert box[0].findings[0].kind == "spawn_resources"
    mode = run("spawn_failed")
    assert Action.GIVE_UP in [d.action for d in mode]

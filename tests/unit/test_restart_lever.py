"""Issue 19: the operator's restart lever is decided like a reload of the same mode
(drain, stop, start), taken once, and marked as the operator's."""

from __future__ import annotations

from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.ladder import (
    LadderState,
    advance,
    apply_operator,
    operate,
    pause,
    restart,
)
from tests.unit.scenario import POLICY, decide_on, samples


def test_issue_19_restart_drains_and_restarts_the_current_mode_once() -> None:
    ladder = restart(LadderState(1, since_s=0))
    d = decide_on(samples(0, 10, rung=1), ladder)
    assert (d.action, d.rung, d.operator) == (Action.RELOAD, 1, True)
    assert d.explanation == "operator asked for a restart -> drain and restart mode " + \
        POLICY.modes[1].name
    after = advance(ladder, d, POLICY, 10.0)
    assert not after.restart_requested and after.rung == 1
    assert decide_on(samples(0, 10, rung=1), after).action is Action.HOLD


def test_issue_19_restart_acts_while_paused_and_replays_from_a_trace() -> None:
    ladder = restart(pause(LadderState(0, since_s=0)))
    assert decide_on(samples(0, 10), ladder).action is Action.RELOAD
    live, action, rung = operate(LadderState(0), POLICY, "restart")
    assert (live.restart_requested, action, rung) == (True, "restart", None)
    assert apply_operator(LadderState(0), action, rung) == live      # the trace replays it

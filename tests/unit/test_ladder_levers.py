"""One owner of the ladder (issue 18): the operator's levers and a policy reload go
through ``decide/ladder.py``, and replay applies the trace's operator records with the
same function, so live and replay cannot diverge after a reload. Step-up windows are
parsed once, at validation."""

from __future__ import annotations

import pytest

from agent_supervisor.decide.ladder import LadderState, apply_operator, operate, reloaded
from agent_supervisor.errors import PolicyError
from agent_supervisor.policy import load_policy
from agent_supervisor.policy.sections import TimeWindow
from tests.unit.scenario import POLICY, POLICY_YAML


def test_levers_and_their_trace_records_give_the_same_ladder() -> None:
    live = LadderState(0, since_s=0)
    replayed = live
    for lever, mode in (("pin", POLICY.modes[2].name), ("unpin", None), ("step-down", None),
                        ("pause", None), ("resume", None)):
        live, action, rung = operate(live, POLICY, lever, mode)
        replayed = apply_operator(replayed, action, rung)     # what replay reads back
        assert replayed == live, lever
    assert live.requested == 1 and not live.paused and live.pinned is None


def test_levers_refuse_what_the_ladder_cannot_do() -> None:
    with pytest.raises(KeyError):
        operate(LadderState(0), POLICY, "pin", "no-such-mode")
    with pytest.raises(ValueError, match="no rung up"):
        operate(LadderState(0), POLICY, "step-up")
    with pytest.raises(ValueError, match="unknown operator action"):
        operate(LadderState(0), POLICY, "jump")


def test_issue_18_a_reload_replays_as_it_ran_live_with_pins_carried_by_name() -> None:
    # The new policy renames the fastest mode (mtp2): a request for it is dropped, the
    # running mode and the pin carry over by name.
    new = load_policy(POLICY_YAML.replace("- {name: mtp2,", "- {name: mtp2-new,"))
    assert new.modes[0].name == "mtp2-new"
    ladder = LadderState(1, since_s=0, pinned=2, requested=0)
    rung, extra = reloaded(ladder, POLICY, new)
    assert rung == 1 and extra["pinned"] == 2 and extra["requested"] is None
    live = apply_operator(ladder, "reload", rung, **extra)
    # The trace record carries rung and extras; replay applies the same function.
    record = {"type": "operator", "t_s": 5.0, "action": "reload", "rung": rung, **extra}
    fields = {k: v for k, v in record.items() if k not in ("type", "t_s", "action", "rung")}
    assert apply_operator(ladder, "reload", record["rung"], **fields) == live
    assert live.requested is None and live.pinned == 2


def test_step_up_windows_are_typed_at_validation() -> None:
    night = TimeWindow.model_validate("22:00-06:00")
    assert (night.start_minute, night.end_minute) == (1320, 360)
    assert night.contains(23 * 60) and night.contains(5 * 60 + 59)
    assert not night.contains(6 * 60) and not night.contains(12 * 60)
    assert TimeWindow.model_validate("09:30-17:00").contains(9 * 60 + 30)
    assert night.model_dump() == "22:00-06:00"
    with pytest.raises(PolicyError, match="is not a window like 22:00-06:00"):
        load_policy(POLICY_YAML.replace("max_transitions_per_hour: 3}",
                                        "max_transitions_per_hour: 3, "
                                        "step_up_windows: ['25:00-01:00']}"))

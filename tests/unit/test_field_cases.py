"""Every field case in tests/fixtures/field/ replayed through the real ``decide()``.

A positive case must get its action (and its finding) within its deadline and not before
``not_before_s``; a negative control must get no action and no finding of its kind.
"""

from __future__ import annotations

import pytest

from agent_supervisor.decide.decision import Action
from tests.helpers.field_cases import all_cases, first_action, load_case, play_case

CASES = list(all_cases())


def test_the_library_has_a_positive_case_and_a_control_for_every_kind() -> None:
    kinds: dict[str, set[bool]] = {}
    for path in CASES:
        case = load_case(path)
        kinds.setdefault(case.kind, set()).add(case.control)
    assert kinds, "no field cases"
    lacking = sorted(k for k, sides in kinds.items() if sides != {True, False})
    assert not lacking, f"kinds without both a positive case and a control: {lacking}"


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_field_case(path) -> None:
    case = load_case(path)
    steps = play_case(case)
    expect = case.expect
    got = first_action(steps, skip=expect.get("allow_before", ()))
    never = [(t, d) for t, d in steps if str(d.action) in expect.get("never", ())]
    assert not never, (f"{case.name}: {never[0][1].action} at t={never[0][0]}: "
                       f"{never[0][1].explanation}")
    if case.control and expect.get("action", "hold") != "hold":
        kinds = {f.kind for _, d in steps for f in d.findings}
        assert case.kind not in kinds, f"{case.name}: the control raised {case.kind}"
    elif case.control or expect.get("action") == "hold":
        assert got is None, (f"{case.name}: expected no action, got {got[1].action} at "
                             f"t={got[0]}: {got[1].explanation}")
        kinds = {f.kind for _, d in steps for f in d.findings}
        if case.control:
            assert case.kind not in kinds, f"{case.name}: the control raised {case.kind}"
        if expect.get("finding"):
            by = float(expect.get("by_s", steps[-1][0]))
            seen = [t for t, d in steps for f in d.findings if f.kind == expect["finding"]]
            assert seen and seen[0] <= by, (
                f"{case.name}: finding {expect['finding']} not raised by t={by}")
        return
    assert got is not None, f"{case.name}: no action over the whole trace"
    t, decision = got
    assert decision.action is Action(expect["action"]), (
        f"{case.name}: first action {decision.action} at t={t} ({decision.explanation}), "
        f"expected {expect['action']}")
    assert t <= float(expect["by_s"]), f"{case.name}: {decision.action} at t={t}, after by_s"
    if "not_before_s" in expect:
        assert t >= float(expect["not_before_s"]), f"{case.name}: acted too early, t={t}"
    if expect.get("finding"):
        assert expect["finding"] in {f.kind for f in decision.findings}, (
            f"{case.name}: {decision.action} for {[f.kind for f in decision.findings]}")
    if "rung" in expect:
        assert decision.rung == int(expect["rung"]), f"{case.name}: rung {decision.rung}"
    for flag, value in (expect.get("start_args") or {}).items():
        assert dict(decision.start_args).get(flag) == value, (
            f"{case.name}: start args {decision.start_args}, expected {flag}={value}")
    if "explains" in expect:
        assert expect["explains"] in decision.explanation, (
            f"{case.name}: {decision.explanation!r} lacks {expect['explains']!r}")

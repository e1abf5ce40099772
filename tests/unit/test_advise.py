"""Issue 31 item 1, advisory mode, in its pure parts and at its one gate: which decisions
turn into effects (``act/advice.py``), how the ladder moves for advice, the executor
recording "would have done X because Y" and doing nothing, the policy's ``mode`` and
``supervisor report``'s summary. The executor's fakes (tests/unit/test_executor.py)
record calls only; tests/process/test_advise.py runs the whole service."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent_supervisor.act.advice import (
    REPEAT_SECONDS,
    AdviceLog,
    as_held,
    carried_out,
    would,
)
from agent_supervisor.act.effects import Executor
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.decide.ladder import LadderState, advance
from agent_supervisor.errors import PolicyError
from agent_supervisor.record.models import IncidentRow
from agent_supervisor.show.report import report_summary, report_text
from agent_supervisor.states import CrashReason
from tests.helpers.fakes import FakeEngine, FakeGateway, FakeRecorder
from tests.helpers.policies import fake_engine_policy

DIED = Finding("engine_dead", "engine_core_died", Severity.CRITICAL,
               "EngineCore died while the API server lived on", {"exit_signal": 9}, "run-7",
               Response.RESTART)


def restart(run_id: str = "run-7") -> Decision:
    return Decision(Action.RESTART, 0, "EngineCore died: crash 1 of mode fast -> restart "
                    "in 0 s", (DIED,), run_id=run_id, start_signature="engine_core_died")


@pytest.mark.parametrize(("action", "advising", "launched", "acts"), [
    (Action.RESTART, False, True, True),
    (Action.SHED, False, True, True),
    (Action.HOLD, True, True, True),
    (Action.START, True, False, True),       # the first launch: the supervisor launches it
    (Action.START, True, True, False),       # a start after the engine went down: advice
    (Action.RESTART, True, True, False),
    (Action.KILL_NOW, True, True, False),
    (Action.STEP_DOWN, True, True, False),
    (Action.STEP_UP, True, True, False),
    (Action.SHED, True, True, False),
    (Action.RELOAD, True, True, False),
    (Action.PLANNED_RESTART, True, True, False),
    (Action.REBOOT_REQUIRED, True, True, False),
    (Action.GIVE_UP, True, True, False),
])
def test_only_the_first_launch_and_holds_are_carried_out_while_advising(
        action: Action, advising: bool, launched: bool, acts: bool) -> None:
    decision = Decision(action, 0, "x")
    assert carried_out(decision, advising=advising, launched=launched) is acts


def test_advice_moves_the_ladder_as_a_hold_so_the_crash_stays_unhandled(tmp_path) -> None:
    policy = fake_engine_policy(tmp_path)
    ladder = LadderState(rung=0)
    acted = advance(ladder, restart(), policy, 100.0)
    assert acted.handled_run_id == "run-7" and acted.crash_times_s == (100.0,)
    advised = advance(ladder, as_held(restart()), policy, 100.0)
    assert advised.handled_run_id is None and advised.crash_times_s == ()
    assert advised.start_failures == () and advised.start_not_before_s == 0.0
    assert advised.last_trouble_s == 100.0          # the trouble was seen all the same
    shed = Decision(Action.SHED, 0, "suspected hang -> shed", shed=True)
    assert advance(ladder, as_held(shed), policy, 5.0).shed is False


def test_the_same_advice_is_recorded_once_while_it_keeps_being_decided() -> None:
    log = AdviceLog()
    assert log.first(restart(), 0.0)
    assert not log.first(restart(), 1.0)
    assert not log.first(restart(), 1.0 + REPEAT_SECONDS)     # decided meanwhile: same
    assert log.first(restart("run-8"), 2.0)                   # another run: new advice
    assert log.first(restart(), 2.0 + 2 * REPEAT_SECONDS + 1)  # gone quiet, then back
    log.clear()
    assert log.first(restart(), 3.0 + 2 * REPEAT_SECONDS)


@pytest.fixture
def advising_rig(tmp_path):
    policy = fake_engine_policy(tmp_path)
    engine, gateway, recorder = FakeEngine(), FakeGateway(), FakeRecorder()
    pokes: list[float] = []
    gave_up: list[bool] = []
    mode = {"advise": True}
    executor = Executor(policy, engine, recorder, poke_at=pokes.append,
                        give_up=lambda: gave_up.append(True), gateway=gateway,
                        advising=lambda: mode["advise"])
    return executor, engine, gateway, recorder, pokes, gave_up, mode


async def test_advising_launches_the_engine_once_then_only_records(advising_rig) -> None:
    executor, engine, gateway, recorder, pokes, gave_up, _ = advising_rig
    await executor.carry_out(Decision(Action.START, 0, "start fast"), from_rung=0)
    assert engine.calls == [("start", 0)]            # the launcher still launches it
    for _ in range(3):                               # the crash is decided on every tick
        assert executor.advisory(restart())
        await executor.carry_out(restart(), from_rung=0)
    await executor.carry_out(Decision(Action.START, 0, "start fast"), from_rung=0)
    await executor.carry_out(Decision(Action.SHED, 0, "shed", shed=True), from_rung=0)
    await executor.carry_out(Decision(Action.GIVE_UP, 0, "give up"), from_rung=0)
    assert engine.calls == [("start", 0)] and gateway.calls == [] and pokes == []
    assert gave_up == []
    actions = [i.action for i, _, _ in recorder.incidents]
    assert actions == ["would_restart", "would_start", "would_shed", "would_give_up"]
    assert recorder.decisions == ["start", "would_restart", "would_start", "would_shed",
                                  "would_give_up"]
    inc, transition, findings = recorder.incidents[0]
    assert transition is None and findings == (DIED,)
    assert (inc.kind, inc.severity, inc.run_id) == ("engine_core_died", "critical", "run-7")
    assert inc.explanation == ("advise mode, not done: EngineCore died: crash 1 of mode "
                               "fast -> restart in 0 s")
    assert inc.outcome == "would have: restart of mode fast in 0 s"
    assert inc.findings[0]["evidence"] == {"exit_signal": 9}      # the same evidence


async def test_switched_to_act_the_same_decision_is_carried_out(advising_rig) -> None:
    executor, engine, gateway, recorder, pokes, _, mode = advising_rig
    await executor.carry_out(Decision(Action.START, 0, "start fast"), from_rung=0)
    await executor.carry_out(restart(), from_rung=0)
    mode["advise"] = False
    assert not executor.advisory(restart())
    await executor.carry_out(restart(), from_rung=0)
    assert engine.calls[1:] == [("kill", "restart: engine_core_died",
                                 CrashReason.ENGINE_CORE_DIED, None)]
    assert gateway.calls == [("hold", False)] and pokes == [0.0]
    assert [i.action for i, _, _ in recorder.incidents] == ["would_restart", "restart"]


def test_would_names_the_recorded_action() -> None:
    assert would(Action.STEP_DOWN) == "would_step_down"


def test_policy_mode_defaults_to_act_and_refuses_other_words(tmp_path) -> None:
    assert fake_engine_policy(tmp_path).mode == "act"
    assert fake_engine_policy(tmp_path, mode="advise").mode == "advise"
    with pytest.raises(PolicyError, match="mode"):
        fake_engine_policy(tmp_path, mode="watch")


def row(action: str, kind: str, minutes_ago: float, explanation: str = "why") -> IncidentRow:
    return IncidentRow(fleet="test", host="h", kind=kind, severity="critical",
                       started_at=datetime.now(UTC) - timedelta(minutes=minutes_ago),
                       action=action, explanation=explanation, findings=[])


def test_report_counts_what_would_have_been_done_apart_from_what_was() -> None:
    rows = [row("would_restart", "engine_core_died", 50, "core died"),
            row("would_restart", "engine_hung", 40, "hung: no progress for 16 s"),
            row("would_restart", "engine_core_died", 30, "core died again"),
            row("would_shed", "engine_hang_suspected", 45),
            row("hold", "spec_acceptance_anomaly", 44),          # a noted finding: left out
            row("advise", "supervision_mode", 60, "started in advise mode"),
            row("act", "supervision_mode", 20, "switched to act"),
            row("reload", "policy_reloaded", 19),                 # not a decision
            row("restart", "engine_core_died", 10)]
    since = datetime.now(UTC) - timedelta(days=7)
    s = report_summary(rows, since)
    assert s["advised"]["decisions"] == 4 and s["done"]["decisions"] == 1
    first = s["advised"]["by_action"][0]
    assert (first["action"], first["count"]) == ("would_restart", 3)
    assert first["kinds"] == {"engine_core_died": 2, "engine_hung": 1}
    assert first["last_explanation"] == "core died again"
    assert [w["to"] for w in s["switches"]] == ["advise", "act"]
    text = report_text(s)
    assert "would have done (advise mode, not carried out): 4 decision(s)" in text
    assert "engine_core_died 2, engine_hung 1" in text
    assert "done (act mode): 1 decision(s)" in text


def test_status_text_says_advise_mode_first() -> None:
    from agent_supervisor.commands.levers import status_text
    from tests.helpers.commands import _status

    assert "ADVISE MODE" not in status_text({**_status(None), "supervision": "act"})
    text = status_text({**_status(None), "supervision": "advise"})
    assert text.splitlines()[0].startswith("ADVISE MODE: decisions are recorded as what "
                                           "they would have done, not carried out")


def test_replay_of_an_advising_trace_keeps_deciding_what_was_advised(tmp_path) -> None:
    """A trace the service wrote while advising: each advised decision is marked, and the
    replay moves its ladder as live did (as for a HOLD), so the crash that was only advised
    is decided on again at the next sample, as it was live; unmarked, it is handled once."""
    from agent_supervisor.decide.replay import replay
    from agent_supervisor.record.trace import TraceWriter, read_trace
    from agent_supervisor.states import EngineState
    from agent_supervisor.telemetry.sample import Sample
    from tests.unit.scenario import POLICY

    def trace(advisory: bool):
        path = tmp_path / f"t-{advisory}.jsonl"
        w = TraceWriter(path)
        w.header(fleet="t", t0_s=0.0, baselines={})
        for t in (1.0, 2.0):
            w.sample(Sample(t_s=t, engine_state=EngineState.CRASHED, engine_run_id="r",
                            engine_rung=0, engine_state_since_s=0.5, engine_exit_code=0,
                            engine_crash_reason="exited"))
            w.decision(t, restart("r"), advisory=advisory)
        w.close()
        return [st.decision.action for st in replay(read_trace(path), POLICY)]

    assert trace(advisory=True) == [Action.RESTART, Action.RESTART]
    assert trace(advisory=False)[1] is not Action.RESTART

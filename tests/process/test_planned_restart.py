"""Issue 13: a planned restart (memory creep at a calm moment, a launch-lottery redraw)
goes out as ``planned_restart``, never as a same-rung step down: from ``decide()`` through
the executor to the real SQLite record and the webhook (real HTTP receiver)."""

from __future__ import annotations

from pathlib import Path

from agent_supervisor.act.effects import Executor
from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.ladder import advance
from agent_supervisor.record.store import Store
from tests.helpers.alerts import Receiver
from tests.helpers.fakes import FakeEngine, FakeGateway
from tests.helpers.field_cases import FIELD, first_action, load_case, play_case
from tests.helpers.policies import fake_engine_policy
from tests.helpers.recorder import make_recorder
from tests.helpers.waiting import wait_for


def planned(kind_dir: str, name: str):
    case = load_case(FIELD / kind_dir / name)
    t, decision = first_action(play_case(case))
    return case, t, decision


def test_the_decisions_are_planned_restarts_of_the_same_rung() -> None:
    for kind_dir, name in (("memory_creep", "leak_per_request_gb10.yaml"),
                           ("spec_launch_lottery", "bad_launch.yaml")):
        case, t, d = planned(kind_dir, name)
        assert d.action is Action.PLANNED_RESTART and d.rung == case.ladder.rung
        assert f"(planned: {kind_dir})" in d.explanation and "step down" not in d.explanation
        after = advance(case.ladder, d, case.policy, t)
        # Not a crash (the start limit does not count it), not a move (no cooldown).
        assert after.crash_times_s == case.ladder.crash_times_s
        assert after.transitions_s == case.ladder.transitions_s


async def test_a_planned_restart_drains_and_is_recorded_and_alerted_as_such(
        tmp_path: Path) -> None:
    _, _, decision = planned("memory_creep", "leak_per_request_gb10.yaml")
    policy = fake_engine_policy(tmp_path)
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}", fleet="test")
    receiver = Receiver()
    recorder, _ = make_recorder(store, tmp_path, receiver.url)
    engine, gateway = FakeEngine(), FakeGateway()
    executor = Executor(policy, engine, recorder, poke_at=lambda s: None,
                        give_up=lambda: None, gateway=gateway)
    recorder.writer.start()
    recorder.alerter.start()
    try:
        await executor.carry_out(decision, from_rung=0)
        await wait_for(lambda: receiver.bodies, timeout=20, what="the alert")
        await recorder.writer.flush()
    finally:
        await recorder.alerter.close()
        await recorder.writer.close()
        receiver.close()
    assert gateway.calls == [("hold", True)]                 # drained, not killed
    assert engine.calls == [("stop", "planned_restart to fast")]
    (row,) = store.incidents()
    assert (row.kind, row.action, row.outcome) == (
        "memory_creep", "planned_restart", "restarted in mode fast (planned: memory_creep)")
    assert store.transitions() == []                          # the rung did not change
    (body,) = receiver.bodies
    assert body["action"] == "planned_restart" and body["transition"] is None
    assert body["outcome"] == "restarted in mode fast (planned: memory_creep)"

"""The executor alone (issue 18): decisions in, side effects out, with recording fakes
for the engine's owner, the gateway and the recorder (llama-swap's ``fakeEffects``
shape). The fakes record calls only; the real launcher, gateway and recorder have their
own process tests."""

from __future__ import annotations

import pytest

from agent_supervisor.act.effects import Executor
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Finding, Severity
from agent_supervisor.states import CrashReason, EngineState
from tests.helpers.fakes import FakeEngine, FakeGateway, FakeRecorder
from tests.helpers.policies import fake_engine_policy


@pytest.fixture
def rig(tmp_path):
    policy = fake_engine_policy(tmp_path)
    engine, gateway, recorder = FakeEngine(), FakeGateway(), FakeRecorder()
    pokes: list[float] = []
    gave_up: list[bool] = []
    executor = Executor(policy, engine, recorder, poke_at=pokes.append,
                        give_up=lambda: gave_up.append(True), gateway=gateway,
                        kernel_lines=lambda: ["NVRM: Xid 79"])
    return executor, engine, gateway, recorder, pokes, gave_up, policy


def finding(kind: str, severity: Severity, guard: str = "g") -> Finding:
    return Finding(guard, kind, severity, f"{kind} seen", {}, "run-0")


async def test_start_launches_and_records_the_run(rig) -> None:
    executor, engine, _, recorder, pokes, _, policy = rig
    await executor.carry_out(Decision(Action.START, 1, "start safe"), from_rung=1)
    assert engine.calls == [("start", 1)]
    assert recorder.runs == [("run-1", policy.engine.port)]
    assert recorder.decisions == ["start"] and recorder.incidents == [] and pokes == []


async def test_graceful_step_down_drains_then_stops_and_records_the_transition(rig) -> None:
    executor, engine, gateway, recorder, pokes, _, _ = rig
    f = finding("memory_pressure", Severity.WARNING, guard="memory_pressure")
    await executor.carry_out(Decision(Action.STEP_DOWN, 1, "step down", (f,),
                                      delay_seconds=2.0), from_rung=0)
    assert gateway.calls == [("hold", True)]
    assert engine.calls == [("stop", "step_down to safe")]
    ((inc, tr, fs),) = recorder.incidents
    assert (inc.kind, inc.severity, inc.mode, inc.kernel_lines) == (
        "memory_pressure", "warning", "fast", ["NVRM: Xid 79"])
    assert (tr.from_mode, tr.to_mode, tr.actor) == ("fast", "safe", "guard:memory_pressure")
    assert fs == (f,) and pokes == [2.0]


async def test_a_critical_finding_kills_without_a_drain(rig) -> None:
    executor, engine, gateway, recorder, pokes, _, _ = rig
    f = finding("engine_core_died", Severity.CRITICAL)
    await executor.carry_out(Decision(Action.RESTART, 0, "restart", (f,)), from_rung=0)
    assert gateway.calls == [("hold", False)]
    assert engine.calls == [("kill", "restart: engine_core_died",
                             CrashReason.ENGINE_CORE_DIED, None)]
    ((inc, tr, _),) = recorder.incidents
    assert inc.kind == "engine_core_died" and tr is None and pokes == [0.0]


async def test_kill_now_names_the_emergency(rig) -> None:
    executor, engine, _, recorder, _, _, _ = rig
    f = finding("memory_floor", Severity.EMERGENCY)
    await executor.carry_out(Decision(Action.KILL_NOW, 1, "kill", (f,)), from_rung=0)
    assert engine.calls == [("kill", "kill_now: memory_floor", None, "memory_floor")]
    assert recorder.incidents[0][1].to_mode == "safe"


async def test_a_stop_that_times_out_is_its_own_critical_incident(rig) -> None:
    executor, engine, _, recorder, pokes, _, _ = rig
    engine.stop_fails = True
    await executor.carry_out(Decision(Action.STEP_UP, 0, "step up"), from_rung=1)
    kinds = [(i.kind, i.severity) for i, _, _ in recorder.incidents]
    assert kinds == [("step_up", "info"), ("engine_stop_timeout", "critical")]
    assert recorder.incidents[1][0].findings == [{"survivors": [1235]}]
    assert pokes == [0.0]


async def test_give_up_asks_the_service_to_stop(rig) -> None:
    executor, engine, _, recorder, pokes, gave_up, _ = rig
    engine.state = EngineState.CRASHED
    await executor.carry_out(Decision(Action.GIVE_UP, 1, "gave up"), from_rung=1)
    assert gave_up == [True] and pokes == []
    assert recorder.incidents[0][0].outcome == "gave up: service exits 1"


async def test_shed_moves_the_gateway_and_hold_notes_a_finding_once_per_run(rig) -> None:
    executor, engine, gateway, recorder, _, _, _ = rig
    await executor.carry_out(Decision(Action.SHED, 0, "shed", shed=True), from_rung=0)
    assert gateway.calls == [("shed", True)] and engine.calls == []
    f = finding("memory_creep", Severity.INFO)
    for _ in range(3):
        await executor.carry_out(Decision(Action.HOLD, 0, "hold", (f,)), from_rung=0)
    assert [i.kind for i, _, _ in recorder.incidents] == ["shed", "memory_creep"]
    assert recorder.decisions == ["shed"]          # a HOLD is not an action taken
    executor.engine_ready(1)
    assert gateway.calls[-1] == ("release", 1)


async def test_issue_12_a_start_carries_its_fallback_flags_and_notes_its_findings(rig) -> None:
    from agent_supervisor.decide.findings import Response
    executor, engine, _, recorder, _, _, _ = rig
    noted = Finding("stop_leftovers", "sigterm_ignored", Severity.INFO, "SIGTERM ignored",
                    {}, "r0", Response.RECORD)
    await executor.carry_out(Decision(Action.START, 0, "start", (noted,),
                                      start_args=(("--enforce-eager", True),)), from_rung=0)
    assert engine.calls == [("start", 0, {"--enforce-eager": True})]
    assert [i.kind for i, _, _ in recorder.incidents] == ["sigterm_ignored"]

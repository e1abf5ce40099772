"""Issue 19: recoveries reach the webhook too: a step back up, and the engine serving
again after an alerted crash (a real service, the fake engine, a real HTTP receiver)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from agent_supervisor.act.incident import Transition
from agent_supervisor.policy.sections import AlertSpec
from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.show.alerts import Alerter
from tests.helpers.alerts import STEP, Receiver, incident
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import until

UP = Transition(at=datetime.now(UTC), from_mode="mtp1", to_mode="mtp2", from_rung=1,
                to_rung=0, reason="calm for 1800 s", actor="schedule")


async def test_issue_19_step_up_and_serving_again_are_sent_once() -> None:
    rx = Receiver()
    alerter = Alerter(AlertSpec(webhook_url=rx.url, min_interval_seconds=60), "fleet-a")
    alerter.start()
    try:
        assert not alerter.engine_serving("mtp2", "run-0")       # nothing came before
        assert alerter.notify(incident(), STEP)                  # crash + step down
        assert alerter.engine_serving("mtp1", "run-1")           # serving again
        assert not alerter.engine_serving("mtp1", "run-2")       # once per incident
        assert alerter.notify(incident("step_up", "info"), UP)   # info, but a step up
        await until(lambda: len(rx.bodies) == 3)
        down, serving, up = rx.bodies
        assert down["recovery"] is False
        assert (serving["kind"], serving["recovery"], serving["mode"], serving["run_id"]) == (
            "engine_serving", True, "mtp1", "run-1")
        assert serving["after"]["kind"] == "engine_core_died"
        assert "engine serving again in mode mtp1" in serving["explanation"]
        assert up["recovery"] is True and up["transition"]["to_mode"] == "mtp2"
    finally:
        await alerter.close()
        rx.close()


async def test_issue_19_slack_recoveries() -> None:
    rx = Receiver()
    alerter = Alerter(AlertSpec(webhook_url=rx.url, format="slack"), "fleet-b")
    alerter.start()
    try:
        alerter.notify(incident("memory_floor", "emergency"), STEP)
        alerter.engine_serving("mtp1", "run-9")
        alerter.notify(incident("step_up", "info"), UP)
        await until(lambda: len(rx.bodies) == 3)
        assert rx.bodies[1]["text"].startswith(":white_check_mark: [fleet-b] engine serving "
                                               "again in mode mtp1 (run run-9) after "
                                               "memory_floor")
        assert rx.bodies[2]["text"].startswith(":white_check_mark: [fleet-b] stepped back up "
                                               "mtp1 -> mtp2.")
    finally:
        await alerter.close()
        rx.close()


async def test_issue_19_service_alerts_the_crash_then_the_engine_serving_again(
        tmp_path: Path) -> None:
    rx = Receiver()
    policy = fake_engine_policy(
        tmp_path, fake_args=["--exit-after", "2.5"], sampling={"tick_seconds": 0.3},
        alerts={"webhook_url": rx.url, "min_interval_seconds": 0},
        restart={"restart_delay_seconds": 0.2, "start_limit_burst": 5})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    task = asyncio.create_task(sup.run())
    try:
        await until(lambda: any(b.get("recovery") for b in rx.bodies), timeout=40)
    finally:
        sup.request_stop("test over")
        await asyncio.wait_for(task, 30)
        rx.close()
    kinds = [(b["kind"], b["recovery"]) for b in rx.bodies]
    first_recovery = kinds.index(("engine_serving", True))
    # The exit is alerted (as `exited`, or as the orphaned EngineCore it leaves behind),
    # then the engine serving again, naming the last alerted incident before it.
    assert first_recovery > 0 and kinds[0][1] is False, kinds
    assert kinds[0][0] in ("exited", "orphan_engine_core"), kinds
    assert rx.bodies[0]["severity"] in ("critical", "emergency")
    assert rx.bodies[first_recovery]["after"]["kind"] == rx.bodies[first_recovery - 1]["kind"]

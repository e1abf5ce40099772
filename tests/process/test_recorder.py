"""The Recorder is the one sink for incidents (issue 18): every incident kind the code
can raise reaches ``supervisor_incidents_total`` and the webhook, and the incidents the
service writes itself at start-up (host reset, unclean stop) and on a refused reload
go through it like a guard's. Real SQLite store, real HTTP receiver."""

from __future__ import annotations

import ast
import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_supervisor.act.incident import Incident
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.decide.decision import Action
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.record.records import AddRun, StartService
from agent_supervisor.record.store import Store
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.reload import Reloader
from agent_supervisor.runtime.startup import StartUp
from agent_supervisor.states import CrashReason
from tests.helpers.alerts import Receiver
from tests.helpers.policies import fake_engine_policy
from tests.helpers.recorder import make_recorder, sample_value
from tests.helpers.waiting import wait_for

PACKAGE = Path(__file__).resolve().parents[2] / "agent_supervisor"


def incident_kinds() -> set[str]:
    """Every incident kind in the code: literal ``Incident(kind=...)``, literals
    assigned to a ``kind`` (``kind, severity = "host_reset", ...``), every guard's
    ``Finding(GUARD, "<kind>", ...)``, the crash reasons and the actions (the kind of a
    decision without findings)."""
    kinds = {str(r) for r in CrashReason} | {str(a) for a in Action}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) \
                    and isinstance(node.value, ast.Tuple):
                kinds |= {v.value for t, v in zip(node.targets[0].elts, node.value.elts,
                                                  strict=False)
                          if isinstance(t, ast.Name) and t.id == "kind"
                          and isinstance(v, ast.Constant)}
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            if node.func.id == "Incident":
                kinds |= {k.value.value for k in node.keywords if k.arg == "kind"
                          and isinstance(k.value, ast.Constant)}
            if node.func.id == "Finding" and len(node.args) > 1 \
                    and isinstance(node.args[1], ast.Constant):
                kinds.add(node.args[1].value)
    return kinds


async def test_issue_18_every_incident_kind_reaches_the_metric_and_the_webhook(
        tmp_path: Path) -> None:
    kinds = sorted(incident_kinds())
    # The service's own kinds are among them (they bypassed the metric and the alert).
    assert {"host_reset", "unclean_stop", "engine_adopted", "orphaned_engine",
            "policy_rejected", "policy_reloaded", "engine_stop_timeout"} <= set(kinds)
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}", fleet="test")
    receiver = Receiver()
    recorder, registry = make_recorder(store, tmp_path, receiver.url)
    recorder.writer.start()
    recorder.alerter.start()
    try:
        for kind in kinds:
            recorder.incident(Incident(kind=kind, severity="critical",
                                       started_at=datetime.now(UTC), action="none",
                                       explanation=f"test of {kind}"))
        await wait_for(lambda: len(receiver.bodies) == len(kinds), timeout=20,
                       what="one alert per kind")
        await recorder.writer.flush()
    finally:
        await recorder.alerter.close()
        await recorder.writer.close()
        receiver.close()
    assert sorted(b["kind"] for b in receiver.bodies) == kinds
    for kind in kinds:
        assert sample_value(registry, "supervisor_incidents_total", kind=kind,
                            severity="critical") == 1.0, kind
    assert sorted(r.kind for r in store.incidents()) == kinds


@pytest.fixture
def crashed_host(tmp_path: Path):
    """A store whose previous life ran an engine on another boot and never stopped."""
    policy = fake_engine_policy(tmp_path)
    store = Store.open(policy.database_url, fleet=policy.fleet)
    earlier = datetime.now(UTC) - timedelta(minutes=5)
    store.apply(StartService(service_run_id="previous", pid=4242, boot_id="another-boot",
                             started_at=earlier))
    store.apply(AddRun(run_id="run-1", mode="fast", rung=0, argv=["vllm"], pid=None,
                       port=policy.engine.port, log_path=str(tmp_path / "x.log"),
                       started_at=earlier))
    return policy, store


async def test_issue_18_host_reset_at_start_up_is_counted_and_alerted(
        tmp_path: Path, crashed_host) -> None:
    policy, store = crashed_host
    receiver = Receiver()
    recorder, registry = make_recorder(store, tmp_path, receiver.url)
    holder = PolicyHolder(policy)
    ladder = Ladder(holder)
    startup = StartUp(holder, EngineLauncher(holder), recorder, ladder)
    recorder.writer.start()
    recorder.alerter.start()
    try:
        await startup.previous_life()
        await startup.clear_leftovers()
        await wait_for(lambda: receiver.bodies, timeout=20, what="the host_reset alert")
        await recorder.writer.flush()
    finally:
        await recorder.alerter.close()
        await recorder.writer.close()
        receiver.close()
    (body,) = receiver.bodies
    assert body["kind"] == "host_reset" and body["severity"] == "critical"
    assert body["transition"]["to_mode"] == "safe"          # one rung down after the reset
    assert ladder.rung == 1
    assert sample_value(registry, "supervisor_incidents_total", kind="host_reset",
                        severity="critical") == 1.0
    assert sample_value(registry, "supervisor_transitions_total", from_mode="fast",
                        to_mode="safe", actor="startup") == 1.0
    (row,) = store.incidents(kind="host_reset")
    assert row.severity == "critical"
    assert {r.run_id: r.outcome for r in store.runs()} == {"run-1": "lost"}


async def test_issue_18_a_refused_reload_is_counted(tmp_path: Path) -> None:
    policy = fake_engine_policy(tmp_path)
    path = tmp_path / "policy.yaml"
    path.write_text("modes: [this is not a policy\n")
    store = Store.open(policy.database_url, fleet=policy.fleet)
    recorder, registry = make_recorder(store, tmp_path, "http://127.0.0.1:9/unused")
    holder = PolicyHolder(policy, path)
    reloader = Reloader(holder, Ladder(holder), recorder, poke=lambda: None)
    recorder.writer.start()
    try:
        assert await reloader.reload("test") is False
        await recorder.writer.flush()
    finally:
        await recorder.writer.close()
    assert holder.current is policy
    assert sample_value(registry, "supervisor_incidents_total", kind="policy_rejected",
                        severity="warning") == 1.0
    (row,) = store.incidents(kind="policy_rejected")
    assert str(path) in row.explanation
    await asyncio.sleep(0)

"""Issue 34, the record safe from the clock: a forward clock jump of 400 days made
retention delete the whole record (every incident, telemetry row and idempotency key).
Real SQLite and PostgreSQL; the service's upkeep job records the hold as an incident."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import func, select

from agent_supervisor.act.incident import Incident
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.record.models import AppliedRecordRow, TelemetryRow
from agent_supervisor.record.records import AddIncident, AddRun, TelemetryPoint, UpdateRun
from agent_supervisor.record.retention import run_retention
from agent_supervisor.record.service_runs import start_service_run, stop_service_run
from agent_supervisor.record.store import Store
from agent_supervisor.record.telemetry import add_telemetry
from agent_supervisor.record.writer import RecordWriter
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder
from agent_supervisor.runtime.upkeep import Upkeep
from agent_supervisor.show.alerts import Alerter
from agent_supervisor.show.metrics import SupervisorMetrics
from agent_supervisor.telemetry.window import Window
from tests.helpers.policies import fake_engine_policy

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
JUMP = NOW + timedelta(days=400)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/s.db"
    return request.getfixturevalue("pg_url")


def counts_of(store: Store) -> dict[str, int]:
    """Rows this fleet holds, by table."""
    with store.session() as s:
        keys = s.scalar(select(func.count()).select_from(AppliedRecordRow))
        telemetry = s.scalar(select(func.count()).select_from(TelemetryRow))
    return {"incidents": len(store.incidents()), "telemetry": telemetry,
            "runs": len(store.runs()), "keys": keys}


def review_record(store: Store, *, until: datetime) -> None:
    """The review's record: 20 incidents, 100 minute telemetry rows, 20 ended engine
    runs, one stopped life, 100 idempotency keys, all in the 20 days before ``until``."""
    start = until - timedelta(days=20)
    for i in range(20):
        at = start + timedelta(days=i)
        store.apply(AddIncident(key=f"inc-{i}", incident=Incident(
            kind="exited", severity="critical", started_at=at, action="restart",
            explanation="exited")))
        store.apply(AddRun(run_id=f"run-{i}", mode="fast", rung=0, argv=[], pid=i + 1,
                           port=1, log_path="", started_at=at))
        store.apply(UpdateRun(run_id=f"run-{i}", values={"ended_at": at + timedelta(hours=1)}))
    add_telemetry(store=store, points=[
        TelemetryPoint(at=start + timedelta(hours=4 * i), resolution_seconds=60,
                       mem_available_bytes=i) for i in range(100)])
    life = start_service_run(store=store, boot_id="b", started_at=start)
    stop_service_run(store=store, service_run_id=life.service_run_id, at=start, exit_code=0)
    with store.session() as s:
        s.execute(AppliedRecordRow.__table__.delete())   # only the review's 100 keys
        s.add_all(AppliedRecordRow(key=f"k-{i}", kind="add_incident",
                                   applied_at=start + timedelta(hours=4 * i))
                  for i in range(100))


def test_issue_34_a_400_day_jump_deletes_nothing_before_new_rows(url: str) -> None:
    """Right after the jump (retention before anything new is written): every cut-off
    is judged against the newest row of its kind, so nothing is old."""
    store = Store.open(url, fleet="f", host="h")
    review_record(store, until=NOW)
    before = counts_of(store)
    counts = run_retention(store=store, now=JUMP, telemetry_retention_days=30,
                           incident_retention_days=365)
    assert counts_of(store) == before == {"incidents": 20, "telemetry": 100, "runs": 20,
                                          "keys": 100}
    assert not any(counts.values()), counts
    store.close()


def test_issue_34_a_400_day_jump_with_the_service_writing_on_is_held(url: str) -> None:
    """After the jump the service writes on at the jumped clock (telemetry, a new life,
    an engine run, keys): most of each table now looks old, and retention holds it."""
    store = Store.open(url, fleet="f", host="h")
    review_record(store, until=NOW)
    add_telemetry(store=store, points=[TelemetryPoint(at=JUMP - timedelta(minutes=m),
                                                      resolution_seconds=60)
                                       for m in range(6)])
    start_service_run(store=store, boot_id="b2", started_at=JUMP - timedelta(hours=1))
    store.apply(AddRun(run_id="after", mode="fast", rung=0, argv=[], pid=99, port=1,
                       log_path="", started_at=JUMP - timedelta(minutes=50)))
    store.apply(AddIncident(key="after", incident=Incident(
        kind="exited", severity="critical", started_at=JUMP - timedelta(minutes=40),
        action="restart", explanation="exited")))
    with store.session() as s:
        s.add_all(AppliedRecordRow(key=f"new-{i}", kind="add_telemetry",
                                   applied_at=JUMP - timedelta(minutes=i)) for i in range(5))
    counts = run_retention(store=store, now=JUMP)
    # keys: the review's 100, the 5 above, and the 4 the applies above wrote at the
    # machine's real clock (before JUMP): every key but the 5 newest looks old.
    assert counts_of(store) == {"incidents": 21, "telemetry": 106, "runs": 21, "keys": 109}
    assert {k: v for k, v in counts.items() if k.endswith("_held")} == {
        "telemetry_held": 100, "incidents_held": 20, "engine_runs_held": 20,
        "keys_held": 104}
    assert counts["telemetry_deleted"] == counts["incidents_deleted"] == 0
    store.close()


def test_issue_34_normal_retention_still_deletes_old_rows(url: str) -> None:
    """Without a jump, a run deletes what is past retention (here the rows of 10 of 40
    days: a quarter, within the bound), and keeps the rest."""
    store = Store.open(url, fleet="f", host="h")
    add_telemetry(store=store, points=[      # every 8 h back from NOW: 29 are > 30 days old
        TelemetryPoint(at=NOW - timedelta(hours=8 * i), resolution_seconds=60)
        for i in range(120)])
    for i in range(40):
        store.apply(AddIncident(incident=Incident(
            kind="exited", severity="critical", started_at=NOW - timedelta(days=i),
            action="restart", explanation="exited")))
    counts = run_retention(store=store, now=NOW, telemetry_retention_days=30,
                           incident_retention_days=30)
    assert (counts["telemetry_deleted"], counts["incidents_deleted"]) == (29, 9)
    assert not [k for k in counts if k.endswith("_held")]
    assert counts_of(store)["telemetry"] == 91 and len(store.incidents()) == 31
    store.close()


def test_issue_34_held_retention_is_an_incident_once_per_life(tmp_path: Path) -> None:
    """The service's retention job records a ``retention_held`` incident naming the
    rows kept (once per life), through the Recorder (metric and alert too)."""
    import asyncio

    policy = fake_engine_policy(tmp_path)
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}", fleet="test")
    long_ago = datetime.now(UTC) - timedelta(days=800)
    review_record(store, until=long_ago)
    add_telemetry(store=store, points=[TelemetryPoint(at=datetime.now(UTC),
                                                      resolution_seconds=60)])
    holder = PolicyHolder(policy)
    metrics = SupervisorMetrics(CollectorRegistry())
    writer = RecordWriter(store, spool_path=tmp_path / "spool.jsonl")
    recorder = Recorder(writer, metrics, Alerter(policy.alerts, "test", metrics.alerts))
    upkeep = Upkeep(holder, recorder, EngineLauncher(holder), Window(), Ladder(holder),
                    lambda: None)

    async def twice() -> None:
        writer.start()
        await upkeep.retention()
        await upkeep.retention()
        await writer.flush()
        await writer.close()

    asyncio.run(twice())
    (inc,) = store.incidents(kind="retention_held")
    assert inc.severity == "warning" and "100 telemetry" in inc.explanation
    assert inc.findings[0]["held_rows"]["telemetry"] == 100
    assert counts_of(store)["telemetry"] == 101
    store.close()

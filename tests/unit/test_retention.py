"""Retention on real SQLite and PostgreSQL: day-old 10-s telemetry folds into minutes,
old rows go, this fleet's only, and a second run has nothing left to do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.record.models import AppliedRecordRow, IncidentRow, TelemetryRow
from agent_supervisor.record.records import AddIncident, AddRun, TelemetryPoint, UpdateRun
from agent_supervisor.record.retention import run_retention
from agent_supervisor.record.service_runs import start_service_run, stop_service_run
from agent_supervisor.record.store import Store
from agent_supervisor.record.telemetry import add_telemetry, telemetry

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/s.db"
    return request.getfixturevalue("pg_url")


def fine_rows(start: datetime, n: int, **values) -> list[TelemetryPoint]:
    return [TelemetryPoint(at=start + timedelta(seconds=10 * i), mem_available_bytes=1000 * i,
                           requests_running=float(i % 6), engine_state="ready",
                           mode="fast" if i % 6 < 5 else "safe", **values) for i in range(n)]


def incident(at: datetime, kind: str = "exited") -> Incident:
    return Incident(kind=kind, severity="critical", started_at=at, action="restart",
                    explanation=kind)


def test_retention_folds_and_deletes(url: str) -> None:
    a = Store.open(url, fleet="f", host="h1")
    b = Store(a.engine, fleet="f", host="h2")
    other = Store(a.engine, fleet="g", host="h1")
    two_days = (NOW - timedelta(days=2)).replace(second=0)
    for store in (a, b, other):
        add_telemetry(store=store, points=fine_rows(two_days, 18))           # 3 minutes
        add_telemetry(store=store, points=fine_rows(NOW - timedelta(hours=1), 6))
    add_telemetry(store=a, points=[TelemetryPoint(at=NOW - timedelta(days=40),
                                                  resolution_seconds=60)])
    old, recent = NOW - timedelta(days=400), NOW - timedelta(days=10)
    for store in (a, other):
        store.apply(AddIncident(incident=incident(old), transition=Transition(
            at=old + timedelta(seconds=1), from_mode="fast", to_mode="safe", from_rung=0,
            to_rung=1, reason="r", actor="guard:x")))
        store.apply(AddIncident(incident=incident(recent, "recent")))
    a.apply(AddRun(run_id="old-ended", mode="fast", rung=0, argv=[], pid=1, port=1,
                   log_path="", started_at=old))
    a.apply(UpdateRun(run_id="old-ended", values={"ended_at": old + timedelta(hours=1)}))
    a.apply(AddRun(run_id="old-open", mode="fast", rung=0, argv=[], pid=2, port=1,
                   log_path="", started_at=old))
    life = start_service_run(store=a, boot_id="x", started_at=old)
    stop_service_run(store=a, service_run_id=life.service_run_id, at=old, exit_code=0)
    # A row is judged against the newest of its kind as well as the clock (issue 34):
    # the newer run and life make the old ones old.
    a.apply(AddRun(run_id="new-open", mode="fast", rung=0, argv=[], pid=3, port=1,
                   log_path="", started_at=recent))
    start_service_run(store=a, boot_id="y", started_at=recent)
    with a.session() as s:
        s.add(AppliedRecordRow(key="old-key", kind="add_run", applied_at=NOW - timedelta(
            days=31)))

    counts = run_retention(store=a, now=NOW)

    assert counts == {"telemetry_folded": 36, "telemetry_minute_rows": 6,
                      "telemetry_deleted": 1, "transitions_deleted": 1,
                      "incidents_deleted": 1, "engine_runs_deleted": 1,
                      "service_runs_deleted": 1, "keys_deleted": 1}
    minutes = telemetry(store=a, since=two_days - timedelta(minutes=1),
                        until=two_days + timedelta(hours=1), host="h1")
    assert [(r.at, r.resolution_seconds) for r in minutes] == [
        (two_days + timedelta(minutes=m), 60) for m in range(3)]
    first = minutes[0]
    assert first.mem_available_bytes == 2500 and first.requests_running == 2.5
    assert (first.mode, first.engine_state) == ("safe", "ready")
    assert first.at.tzinfo is not None
    assert len(telemetry(store=a, since=NOW - timedelta(hours=2), resolution_seconds=10)) == 12
    assert len(telemetry(store=other, since=two_days, resolution_seconds=10)) == 24  # fleet g
    assert [i.kind for i in a.incidents()] == ["recent"]
    assert len(other.incidents()) == 2 and len(other.transitions()) == 1
    assert sorted(r.run_id for r in a.runs()) == ["new-open", "old-open"]
    assert run_retention(store=a, now=NOW) == dict.fromkeys(counts, 0)
    with a.session() as s:
        assert s.scalar(select(func.count()).select_from(IncidentRow)) == 3
        assert s.scalar(select(func.count()).select_from(TelemetryRow)) == 6 + 12 + 24
    a.close()


def test_retention_periods_are_arguments(url: str) -> None:
    store = Store.open(url, fleet="f", host="h")
    store.apply(AddIncident(incident=incident(NOW - timedelta(days=3))))
    store.apply(AddIncident(incident=incident(NOW, "now")))
    add_telemetry(store=store, points=fine_rows(NOW - timedelta(days=3), 6))
    add_telemetry(store=store, points=fine_rows(NOW, 1))
    counts = run_retention(store=store, now=NOW, telemetry_retention_days=2,
                           incident_retention_days=2)
    assert (counts["telemetry_folded"], counts["telemetry_deleted"],
            counts["incidents_deleted"]) == (6, 2, 1)   # 12:00:30-12:01:20: 2 minutes
    assert [i.kind for i in store.incidents()] == ["now"]
    store.close()

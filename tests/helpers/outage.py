"""Records a service writes during a database outage, and the checks that none was lost
or doubled (shared by the SQLite and PostgreSQL outage tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select

from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.record.models import (
    IncidentRow,
    ModeTransitionRow,
    ServiceRunRow,
    TelemetryRow,
)
from agent_supervisor.record.records import (
    AddIncident,
    AddRun,
    AddTelemetry,
    Record,
    ServiceHeartbeat,
    StartService,
    TelemetryPoint,
    UpdateRun,
)
from agent_supervisor.record.store import Store
from agent_supervisor.record.writer import RecordWriter

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def outage_records(n: int = 3) -> list[Record]:
    """What a service writes while the database is away: the run's end, incidents with
    their transitions, telemetry, heartbeats."""
    out: list[Record] = [UpdateRun(run_id="r1", values={"ready_at": T0, "startup_seconds": 1.0})]
    for i in range(n):
        t = T0 + timedelta(minutes=i + 1)
        out.append(AddIncident(
            incident=Incident(kind="exited", severity="critical", started_at=t,
                              action="step_down", explanation=f"crash {i}", mode="fast"),
            transition=Transition(at=t, from_mode="fast", to_mode="safe", from_rung=0,
                                  to_rung=1, reason=f"crash {i}", actor="guard:engine_dead")))
        out.append(AddTelemetry(points=tuple(
            TelemetryPoint(at=t + timedelta(seconds=10 * k), mem_available_bytes=1000 + k)
            for k in range(3))))
        out.append(ServiceHeartbeat(service_run_id="s1", at=t))
    out.append(UpdateRun(run_id="r1", values={"ended_at": T0 + timedelta(hours=1),
                                              "outcome": "crashed"}))
    return out


def counts(store: Store) -> dict[str, int]:
    with store.session() as s:
        return {t.__tablename__: s.scalar(select(func.count()).select_from(t))
                for t in (IncidentRow, ModeTransitionRow, TelemetryRow, ServiceRunRow)}


def assert_all_there_once(store: Store, n: int = 3) -> None:
    assert counts(store) == {"incidents": n, "mode_transitions": n, "telemetry": 3 * n,
                             "service_runs": 1}
    with store.session() as s:
        pairs = s.execute(select(IncidentRow.explanation, ModeTransitionRow.reason).join(
            ModeTransitionRow, ModeTransitionRow.incident_id == IncidentRow.id)
            .order_by(IncidentRow.id)).all()
        beat = s.scalar(select(ServiceRunRow.heartbeat_at))
    assert [tuple(p) for p in pairs] == [(f"crash {i}", f"crash {i}") for i in range(n)]
    assert beat == T0 + timedelta(minutes=n)
    (run,) = store.runs()
    assert (run.outcome, run.startup_seconds) == ("crashed", 1.0)


async def started_writer(store: Store, spool: Path) -> RecordWriter:
    writer = RecordWriter(store, spool_path=spool, retry_interval_seconds=0)
    writer.start()
    writer.submit(AddRun(run_id="r1", mode="fast", rung=0, argv=["vllm"], pid=1, port=8000,
                         log_path="/l", started_at=T0))
    writer.submit(StartService(service_run_id="s1", pid=1, boot_id="b", started_at=T0))
    await writer.flush()
    assert writer.spooled == 0
    return writer

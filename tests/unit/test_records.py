"""Records: JSON round trips (the spool's line format) and idempotent application."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from agent_supervisor.errors import StoreError
from agent_supervisor.record.models import AppliedRecordRow, IncidentRow, ModeTransitionRow
from agent_supervisor.record.records import (
    AddIncident,
    AddRun,
    AddTelemetry,
    AddTransition,
    Incident,
    ServiceHeartbeat,
    StartService,
    StopService,
    TelemetryPoint,
    Transition,
    UpdateRun,
    record_from_json,
    record_to_json,
)
from agent_supervisor.record.store import Store, is_unavailable

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
INCIDENT = Incident(kind="exited", severity="critical", started_at=T0, action="step_down",
                    explanation="engine exited", mode="mtp2", rung=0, run_id="r1",
                    findings=[{"guard": "engine_dead", "evidence": {"exit_code": 1,
                                                                    "ratio": 0.5}}],
                    log_tail="boom", kernel_lines=["NVRM: Xid 31"],
                    ended_at=T0 + timedelta(seconds=5))
TRANSITION = Transition(at=T0, from_mode="mtp2", to_mode="nospec", from_rung=0, to_rung=1,
                        reason="crash with speculation", actor="guard:engine_dead")
ALL = [
    AddRun(run_id="r1", mode="mtp2", rung=0, argv=["vllm", "serve"], pid=7, port=8000,
           log_path="/l/r1.log", started_at=T0, engine_version="0.32.0"),
    UpdateRun(run_id="r1", values={"ready_at": T0 + timedelta(seconds=30),
                                   "startup_seconds": 30.0, "planned_stop": None}),
    AddIncident(incident=INCIDENT, transition=TRANSITION),
    AddIncident(incident=INCIDENT),
    AddTransition(transition=TRANSITION),
    AddTelemetry(points=(TelemetryPoint(at=T0, mem_available_bytes=10**10,
                                        kv_cache_usage_ratio=0.25, mode="mtp2"),
                         TelemetryPoint(at=T0 + timedelta(seconds=10)))),
    StartService(service_run_id="s1", pid=9, boot_id="b", started_at=T0, policy_path="/p"),
    ServiceHeartbeat(service_run_id="s1", at=T0),
    StopService(service_run_id="s1", at=T0, exit_code=0),
]


@pytest.mark.parametrize("record", ALL, ids=lambda r: r.kind)
def test_records_round_trip_through_json(record) -> None:
    line = record_to_json(record)
    assert "\n" not in line
    back = record_from_json(line)
    assert back == record and type(back) is type(record)
    assert back.key == record.key


def test_times_come_back_aware() -> None:
    back = record_from_json(record_to_json(ALL[1]))
    assert back.values["ready_at"].tzinfo is not None


def test_every_record_gets_its_own_key() -> None:
    assert len({r.key for r in ALL}) == len(ALL)


@pytest.mark.parametrize("line", ["", "[]", '{"type": "nope"}', '{"type": "add_run"}',
                                  '{"type": "stop_service", "service_run_id": "s", '
                                  '"at": 1, "exit_code": 0, "extra": 1}'])
def test_bad_lines_are_value_errors(line: str) -> None:
    with pytest.raises(ValueError):
        record_from_json(line)


def test_applying_twice_writes_once(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    for record in ALL:
        assert store.apply(record) is True
    for record in ALL:
        assert store.apply(record_from_json(record_to_json(record))) is False
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(IncidentRow)) == 2
        assert s.scalar(select(func.count()).select_from(ModeTransitionRow)) == 2
        assert s.scalar(select(func.count()).select_from(AppliedRecordRow)) == len(ALL)
        linked = s.scalars(select(ModeTransitionRow.incident_id)).all()
    assert sorted(linked, key=str)[0] is not None        # the one with an incident points at it
    (run,) = store.runs()
    assert (run.engine_version, run.startup_seconds) == ("0.32.0", 30.0)
    store.close()


def test_a_record_that_can_never_apply_is_not_an_outage(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    with pytest.raises(StoreError) as err:
        store.apply(UpdateRun(run_id="nope", values={"outcome": "x"}))
    assert not is_unavailable(err.value)
    with pytest.raises(StoreError, match="no column 'fleet'"):
        store.apply(UpdateRun(run_id="nope", values={"fleet": "other"}))
    store.close()

"""Command-line views of the store: one incident in full, the mode history, exports."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.record.queries import engine_runs, incident, incident_transitions, timeline
from agent_supervisor.record.records import AddIncident, AddRun, AddTransition, TelemetryPoint
from agent_supervisor.record.service_runs import service_runs, start_service_run
from agent_supervisor.record.store import Store
from agent_supervisor.record.telemetry import add_telemetry, telemetry
from agent_supervisor.show.export import EXPORTS, export_rows
from agent_supervisor.show.history import history_table
from agent_supervisor.show.incident import format_value, incident_detail
from agent_supervisor.show.tables import incidents_json

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h1")
    store.apply(AddRun(run_id="r1", mode="mtp2", rung=0, pid=7, port=8000,
                       log_path="/l/r1.log", started_at=T0,
                       argv=["vllm", "serve", "m", "--api-key", "sk-1"]))
    store.apply(AddIncident(incident=Incident(
        kind="nv_err_no_memory", severity="emergency", started_at=T0 + timedelta(minutes=5),
        action="kill_now", explanation="NV_ERR_NO_MEMORY in the kernel log: kill, step down",
        mode="mtp2", rung=0, run_id="r1", outcome="stepped down to nospec",
        findings=[{"guard": "memory_floor", "kind": "nv_err_no_memory",
                   "severity": "emergency", "summary": "the driver ran out of memory",
                   "evidence": {"mem_available_bytes": 812_000_000, "floor_ratio": 0.03125,
                                "events": ["xid:31"], "swap": None},
                   "run_id": "r1", "response": "kill"}],
        kernel_lines=["NVRM: nvAssertOkFailedNoLog: NV_ERR_NO_MEMORY"],
        log_tail="INFO starting\nERROR CUDA error: out of memory"),
        transition=Transition(at=T0 + timedelta(minutes=5), from_mode="mtp2",
                              to_mode="nospec", from_rung=0, to_rung=1,
                              reason="NV_ERR_NO_MEMORY", actor="guard:memory_floor")))
    store.apply(AddTransition(transition=Transition(
        at=T0 + timedelta(hours=2), from_mode="nospec", to_mode="mtp2", from_rung=1,
        to_rung=0, reason="calm for 2 h", actor="schedule")))
    add_telemetry(store=store, points=[TelemetryPoint(at=T0, mem_available_bytes=5,
                                                      mode="mtp2")])
    start_service_run(store=store, boot_id="b", started_at=T0, pid=1)
    yield store
    store.close()


def test_incident_detail_shows_all_the_evidence(store: Store) -> None:
    (row,) = store.incidents()
    text = incident_detail(incident(store=store, incident_id=row.id),
                           incident_transitions(store=store, incident_id=row.id))
    lines = text.splitlines()
    assert lines[0] == f"incident {row.id}: nv_err_no_memory [emergency]"
    assert "  when         2026-11-30 08:05:00 UTC" in lines
    assert "  mode         mtp2 (rung 0), engine run r1" in lines
    assert "  action       kill_now" in lines
    assert "  outcome      stepped down to nospec" in lines
    assert "  1. [emergency] nv_err_no_memory (guard memory_floor)" in lines
    assert "       mem_available_bytes  812000000" in lines
    assert "       floor_ratio          0.03125" in lines
    assert '       events               ["xid:31"]' in lines
    assert "       swap                 unknown" in lines
    assert ("  2026-11-30 08:05:00 UTC  mtp2 -> nospec  by guard:memory_floor: NV_ERR_NO_MEMORY"
            in lines)
    assert "  NVRM: nvAssertOkFailedNoLog: NV_ERR_NO_MEMORY" in lines
    assert lines[-2:] == ["  | INFO starting", "  | ERROR CUDA error: out of memory"]
    assert incident(store=store, incident_id=row.id + 100) is None


def test_incident_detail_of_a_bare_incident(store: Store) -> None:
    store.apply(AddIncident(incident=Incident(kind="k", severity="info", started_at=T0,
                                              action="hold", explanation="x")))
    (row,) = store.incidents(kind="k")
    text = incident_detail(incident(store=store, incident_id=row.id))
    assert "findings: none" in text and "kernel lines: none" in text
    assert "engine log tail: none" in text and "mode transitions" not in text


def test_format_value() -> None:
    assert [format_value(v) for v in (None, True, 1 / 3, 12, "x", {"a": 1})] == [
        "unknown", "true", "0.3333", "12", "x", '{"a": 1}']


def test_history_is_the_timeline_oldest_first(store: Store) -> None:
    rows = timeline(store=store)
    lines = history_table(rows).splitlines()
    assert lines[0].split() == ["at", "(UTC)", "from", "->", "to", "(rung)", "actor",
                                "incident", "reason"]
    assert lines[1].split()[:7] == ["2026-11-30", "08:05:00", "mtp2", "(0)", "->", "nospec",
                                    "(1)"]
    assert "guard:memory_floor" in lines[1] and lines[2].endswith("calm for 2 h")
    assert [r.to_mode for r in timeline(store=store, since=T0 + timedelta(hours=1))] == ["mtp2"]
    assert [r.to_mode for r in timeline(store=store, limit=1)] == ["mtp2"]
    assert history_table([]) == "(no mode transitions recorded)"


def rows_for(store: Store, what: str) -> list:
    return {"incidents": lambda: store.incidents(), "transitions": lambda: timeline(store=store),
            "runs": lambda: engine_runs(store=store),
            "services": lambda: service_runs(store=store),
            "telemetry": lambda: telemetry(store=store, since=T0)}[what]()


@pytest.mark.parametrize("what", list(EXPORTS))
def test_exports_round_trip(store: Store, what: str) -> None:
    rows = rows_for(store, what)
    as_json = json.loads(export_rows(rows, what=what, fmt="json"))
    as_csv = list(csv.DictReader(io.StringIO(export_rows(rows, what=what, fmt="csv"))))
    assert len(as_json) == len(as_csv) == len(rows) > 0
    assert list(as_csv[0]) == list(as_json[0])
    for j, c in zip(as_json, as_csv, strict=True):
        for key, value in j.items():
            expected = ("" if value is None else json.dumps(value, separators=(",", ":"))
                        if isinstance(value, list | dict) else str(value))
            assert c[key] == expected, key


def test_export_details(store: Store) -> None:
    (inc,) = json.loads(export_rows(store.incidents(), what="incidents", fmt="json"))
    assert inc["findings"][0]["evidence"]["events"] == ["xid:31"]
    assert inc["started_at"] == "2026-11-30T08:05:00+00:00" and inc["ended_at"] is None
    (run,) = json.loads(export_rows(engine_runs(store=store), what="runs", fmt="json"))
    assert run["argv"][-1] == "***"
    assert json.loads(incidents_json(store.incidents()))[0]["kernel_lines"] == [
        "NVRM: nvAssertOkFailedNoLog: NV_ERR_NO_MEMORY"]
    header = export_rows([], what="transitions", fmt="csv")
    assert header == "id,fleet,host,at,from_mode,to_mode,from_rung,to_rung,actor,reason," \
                     "incident_id\n"
    assert export_rows([], what="runs", fmt="json") == "[]"
    with pytest.raises(ValueError, match="--what must be one of"):
        export_rows([], what="samples", fmt="csv")
    with pytest.raises(ValueError, match="--format must be one of csv, json"):
        export_rows([], what="runs", fmt="xml")

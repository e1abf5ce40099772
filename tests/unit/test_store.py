"""The incident store on real SQLite and PostgreSQL: migrations up and down, the schema
they build equals the models, records round-trip with UTC times."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.errors import StoreError
from agent_supervisor.record.models import Base
from agent_supervisor.record.records import AddIncident, AddRun, UpdateRun
from agent_supervisor.record.store import Store, downgrade, make_engine, upgrade

TABLES = {"engine_runs", "incidents", "mode_transitions", "mode_baselines", "telemetry",
          "service_runs", "applied_records", "alembic_version"}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/sub/dir/s.db"
    return request.getfixturevalue("pg_url")


def test_migrations_upgrade_and_downgrade_cleanly(url: str) -> None:
    engine = make_engine(url)
    upgrade(engine)
    assert set(inspect(engine).get_table_names()) >= TABLES
    downgrade(engine, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    upgrade(engine)                       # and back up again
    assert set(inspect(engine).get_table_names()) >= TABLES
    engine.dispose()


def test_0003_downgrades_and_upgrades_with_rows_in_place(url: str) -> None:
    """Reversible with data: 0002's rows survive a round trip through 0003's downgrade
    (SQLite's batch mode copies the incidents table that transitions point at)."""
    engine = make_engine(url)
    upgrade(engine)
    store = Store(engine, fleet="f", host="h")
    t0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    store.apply(AddRun(run_id="r1", mode="m", rung=0, argv=["vllm"], pid=1, port=8000,
                       log_path="/l", started_at=t0, engine_version="0.32.0"))
    store.apply(AddIncident(
        incident=Incident(kind="k", severity="info", started_at=t0,
                          ended_at=t0 + timedelta(minutes=1), action="hold", explanation="x"),
        transition=Transition(at=t0, from_mode="m", to_mode="n", from_rung=0, to_rung=1,
                              reason="r", actor="operator")))
    (before,) = store.incidents()
    iid = before.id
    assert store.transitions()[0].incident_id == iid
    downgrade(engine, "0002")
    names = set(inspect(engine).get_table_names())
    assert not names & {"telemetry", "service_runs", "applied_records"}
    assert "ended_at" not in {c["name"] for c in inspect(engine).get_columns("incidents")}
    upgrade(engine)
    (inc,) = store.incidents()
    assert (inc.id, inc.ended_at) == (iid, None)
    (tr,) = store.transitions()
    assert tr.incident_id == iid
    (run,) = store.runs()
    assert (run.run_id, run.engine_version) == ("r1", None)
    engine.dispose()


def test_migrated_schema_matches_the_models(url: str) -> None:
    engine = make_engine(url)
    upgrade(engine)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, Base.metadata)
    engine.dispose()
    assert diff == []


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/s.db")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 5000
    engine.dispose()


def test_records_round_trip(url: str) -> None:
    store = Store.open(url, fleet="f", host="h1")
    t0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    store.apply(AddRun(run_id="r1", mode="mtp2", rung=0, argv=["vllm", "serve", "m"], pid=42,
                       port=8000, log_path="/l/r1.log", started_at=t0))
    store.apply(UpdateRun(run_id="r1", values={"ready_at": t0 + timedelta(seconds=30),
                                               "startup_seconds": 30.0}))
    assert [r.run_id for r in store.unfinished_runs()] == ["r1"]
    store.apply(UpdateRun(run_id="r1", values={
        "ended_at": t0 + timedelta(minutes=5), "exit_code": 0, "planned_stop": False,
        "outcome": "exited"}))
    assert store.unfinished_runs() == []
    store.apply(AddIncident(
        incident=Incident(
            kind="exited", severity="critical", started_at=t0 + timedelta(minutes=5),
            action="restart", explanation="engine exited", mode="mtp2", rung=0, run_id="r1",
            findings=[{"guard": "engine_dead", "evidence": {"exit_code": 0}}],
            log_tail="boom"),
        transition=Transition(at=t0 + timedelta(minutes=6), from_mode="mtp2",
                              to_mode="mtp1", from_rung=0, to_rung=1, reason="3 crashes",
                              actor="guard:engine_dead")))
    (run,) = store.runs()
    assert run.argv == ["vllm", "serve", "m"]
    assert run.engine_version is None
    assert run.ready_at == t0 + timedelta(seconds=30) and run.ready_at.tzinfo is not None
    (inc,) = store.incidents(kind="exited")
    assert inc.findings[0]["evidence"] == {"exit_code": 0}
    assert inc.started_at.utcoffset() == timedelta(0)
    assert store.incidents(since=t0 + timedelta(hours=1)) == []
    (tr,) = store.transitions()
    assert (tr.from_mode, tr.to_mode, tr.incident_id) == ("mtp2", "mtp1", inc.id)
    store.close()


def test_fleets_sharing_a_database_see_their_own_records(url: str) -> None:
    a = Store.open(url, fleet="a", host="h")
    b = Store(a.engine, fleet="b", host="h")
    t = datetime.now(UTC)
    a.apply(AddIncident(incident=Incident(kind="k", severity="info", started_at=t,
                                          action="hold", explanation="x")))
    assert len(a.incidents()) == 1 and b.incidents() == []
    a.close()


def test_naive_datetimes_are_refused(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f")
    with pytest.raises(StoreError, match="naive datetime"):
        store.apply(AddIncident(incident=Incident(
            kind="k", severity="info", action="hold", started_at=datetime(2026, 1, 1),
            explanation="x")))
    assert store.incidents() == []
    store.close()


def test_update_of_unknown_run_is_an_error(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f")
    with pytest.raises(StoreError, match="no engine run 'nope'"):
        store.apply(UpdateRun(run_id="nope", values={"outcome": "x"}))
    store.close()


def test_unreachable_database_is_a_store_error() -> None:
    with pytest.raises(StoreError):
        Store.open("postgresql+psycopg://nobody@127.0.0.1:1/none", fleet="f")


def test_secrets_are_masked_before_they_are_stored(url: str) -> None:
    store = Store.open(url, fleet="f", host="h")
    t0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    store.apply(AddRun(run_id="r1", mode="m", rung=0, pid=1, port=8000, log_path="/l",
                       started_at=t0, argv=["vllm", "serve", "m", "--api-key", "sk-123",
                                            "--hf-token=hf_abc", "--max-num-batched-tokens",
                                            "64"]))
    store.apply(UpdateRun(run_id="r1", values={"error": "exited: --api-key sk-123 refused"}))
    store.apply(AddIncident(incident=Incident(
        kind="k", severity="info", started_at=t0, action="hold", explanation="x",
        log_tail="INFO non-default args: {'model': 'm', 'api_key': ['sk-123']}")))
    (run,) = store.runs()
    assert run.argv == ["vllm", "serve", "m", "--api-key", "***", "--hf-token=***",
                        "--max-num-batched-tokens", "64"]
    assert "sk-123" not in run.error
    (inc,) = store.incidents()
    assert "sk-123" not in inc.log_tail and "'api_key': ['***']" in inc.log_tail
    with store.engine.connect() as conn:
        for table in ("engine_runs", "incidents"):
            dump = " ".join(str(v) for row in conn.execute(text(f"SELECT * FROM {table}"))
                            for v in row)
            assert "sk-123" not in dump and "hf_abc" not in dump
    store.close()


def test_downgrade_keeps_working_with_transitions_pointing_at_incidents(url: str) -> None:
    store = Store.open(url, fleet="f", host="h")
    t = datetime(2026, 1, 1, tzinfo=UTC)
    store.apply(AddIncident(incident=Incident(kind="k", severity="warning", started_at=t,
                                              action="step_down", explanation="x"),
                            transition=Transition(at=t, from_mode="a", to_mode="b",
                                                  from_rung=0, to_rung=1, reason="x",
                                                  actor="guard:g")))
    downgrade(store.engine, "0001")
    (tr,) = Store(store.engine, fleet="f", host="h").transitions()
    assert tr.to_mode == "b"
    store.close()


def test_processes_opening_a_new_database_at_once_all_migrate_it(url: str) -> None:
    # The service and a CLI command (or two hosts of a fleet) opening an empty database
    # together: each must end at the newest schema, none may fail on a table the other
    # just created.
    code = ("import sys; from agent_supervisor.record.store import Store; "
            "Store.open(sys.argv[1], fleet='race').close()")
    procs = [subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, "\n".join(errors)
    engine = make_engine(url)
    with engine.connect() as conn:
        versions = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    engine.dispose()
    assert len(versions) == 1


def test_issue_12_run_fields_and_the_starts_budgets_are_learned_from(url: str) -> None:
    store = Store.open(url, fleet="f", host="h1")
    t0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    for n, (mode, secs) in enumerate([("mtp2", 30.0), ("safe", None), ("mtp2", 45.5)]):
        store.apply(AddRun(run_id=f"r{n}", mode=mode, rung=0, argv=["vllm"], pid=None,
                           port=8000, log_path="/l", started_at=t0,
                           mem_available_before_bytes=118 * 2**30))
        if secs is not None:
            store.apply(UpdateRun(run_id=f"r{n}", values={"startup_seconds": secs,
                                                          "sigterm_ignored": True}))
    assert store.start_durations() == [("mtp2", 30.0), ("mtp2", 45.5)]
    run = store.runs()[0]
    assert (run.mem_available_before_bytes, run.sigterm_ignored) == (118 * 2**30, True)
    assert Store(store.engine, fleet="other", host="h1").start_durations() == []
    store.close()

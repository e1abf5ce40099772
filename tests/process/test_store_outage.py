"""PostgreSQL really stopped under a running writer, then started again: every record
written while it was down lands exactly once, in order, after it is back.

Stops the local cluster with ``pg_ctlcluster`` (root) and always starts it again in a
``finally``; skipped where the test database is not that local cluster.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from agent_supervisor.errors import StoreError
from agent_supervisor.record.records import AddRun, StartService
from agent_supervisor.record.store import Store, make_engine
from agent_supervisor.record.writer import RecordWriter
from tests.helpers.outage import (
    T0,
    assert_all_there_once,
    counts,
    outage_records,
    started_writer,
)
from tests.helpers.paths import PG_URL

pytestmark = pytest.mark.postgres


def _cluster() -> tuple[str, str] | None:
    """(version, name) of the local cluster serving PG_URL, or None."""
    if shutil.which("pg_ctlcluster") is None or "127.0.0.1:5432" not in PG_URL:
        return None
    versions = sorted(Path("/etc/postgresql").glob("*/main"))
    return (versions[-1].parent.name, "main") if versions else None


def _pg_ctl(action: str) -> None:
    version, name = _cluster() or ("", "")
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, name, action],
                   check=True, capture_output=True, timeout=60)


def _wait_until_up(timeout: float = 30.0) -> None:
    engine = create_engine(PG_URL)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                with engine.connect() as conn:
                    conn.execute(text("SELECT 1"))
                return
            except OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        engine.dispose()


@pytest.mark.skipif(_cluster() is None, reason="needs the local PostgreSQL cluster")
async def test_postgresql_stopped_and_started_loses_and_duplicates_nothing(
        pg_url: str, tmp_path: Path) -> None:
    store = Store.open(pg_url, fleet="f", host="h")
    spool = tmp_path / "spool.jsonl"
    writer = await started_writer(store, spool)
    records = outage_records()
    try:
        _pg_ctl("stop")
        for record in records:
            writer.submit(record)
        await writer.flush()
        writer.replay_spool()
        await writer.flush()
        assert writer.spooled == len(records)
        assert len(spool.read_text().splitlines()) == len(records)
        with pytest.raises(StoreError):
            store.incidents()
    finally:
        _pg_ctl("start")
        _wait_until_up()
    writer.replay_spool()
    await writer.flush()
    assert writer.spooled == 0 and writer.replayed == len(records)
    assert not spool.exists()
    assert_all_there_once(store)
    writer.replay_spool()                   # nothing left to do, nothing doubled
    await writer.flush()
    assert counts(store)["incidents"] == 3
    await writer.close()


@pytest.mark.skipif(_cluster() is None, reason="needs the local PostgreSQL cluster")
async def test_postgresql_down_at_a_restart_of_the_service(pg_url: str, tmp_path: Path) -> None:
    """Records spooled by a life that ended during the outage are replayed by the next."""
    spool = tmp_path / "spool.jsonl"
    writer = await started_writer(Store.open(pg_url, fleet="f", host="h"), spool)
    try:
        _pg_ctl("stop")
        for record in outage_records():
            writer.submit(record)
        await writer.close()
    finally:
        _pg_ctl("start")
        _wait_until_up()
    store = Store.open(pg_url, fleet="f", host="h")
    second = RecordWriter(store, spool_path=spool)
    second.start()
    await second.flush()
    assert second.spooled == 0
    assert_all_there_once(store)
    await second.close()


async def test_postgresql_read_only_is_waited_out_not_rejected(pg_url: str,
                                                               tmp_path: Path) -> None:
    """A read-only server (a standby after a failover) refuses writes with SQLSTATE
    25006: the records wait in the spool, and a writable server takes them once."""
    store = Store.open(pg_url, fleet="f", host="h")
    store.apply(AddRun(run_id="r1", mode="fast", rung=0, argv=["vllm"], pid=1, port=8000,
                       log_path="/l", started_at=T0))
    store.apply(StartService(service_run_id="s1", pid=1, boot_id="b", started_at=T0))
    read_only = Store(make_engine(pg_url + "%20-cdefault_transaction_read_only%3Don"),
                      fleet="f", host="h")
    spool = tmp_path / "spool.jsonl"
    writer = RecordWriter(read_only, spool_path=spool, retry_interval_seconds=0)
    writer.start()
    records = outage_records()
    for record in records:
        writer.submit(record)
    await writer.flush()
    assert writer.spooled == len(records) and writer.rejected == 0
    await writer.close()
    second = RecordWriter(store, spool_path=spool)
    second.start()
    await second.flush()
    assert second.spooled == 0
    assert_all_there_once(store)
    await second.close()

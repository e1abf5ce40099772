"""The spool on real failures: a write the database cannot take waits on disk, in order,
and a replay writes it exactly once. SQLite fails for real here (root ignores file
permissions, so: an EXCLUSIVE lock held by another connection, and the database file
replaced by a directory); the PostgreSQL outage is in tests/process/test_store_outage.py.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from agent_supervisor.errors import StoreError
from agent_supervisor.record.records import (
    AddRun,
    AddTelemetry,
    StartService,
    UpdateRun,
    record_to_json,
)
from agent_supervisor.record.spool import Spool
from agent_supervisor.record.store import Store
from agent_supervisor.record.writer import RecordWriter
from tests.helpers.outage import (
    T0,
    assert_all_there_once,
    counts,
    outage_records,
    started_writer,
)


async def test_sqlite_locked_by_another_writer(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = Store.open(f"sqlite:///{db}", fleet="f", host="h", busy_timeout_ms=50)
    writer = await started_writer(store, tmp_path / "spool.jsonl")
    locker = sqlite3.connect(db, timeout=0)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        for record in outage_records():
            writer.submit(record)
        await writer.flush()
        writer.replay_spool()               # the timer fires while still locked
        await writer.flush()
        assert writer.spooled == len(outage_records())
        assert len((tmp_path / "spool.jsonl").read_text().splitlines()) == writer.spooled
        assert writer.failed_writes == 1    # the first refusal; the rest queued behind it
    finally:
        locker.rollback()
        locker.close()
    assert counts(store)["incidents"] == 0
    writer.replay_spool()
    await writer.flush()
    assert writer.spooled == 0 and not (tmp_path / "spool.jsonl").exists()
    assert_all_there_once(store)
    await writer.close()


async def test_sqlite_file_gone_then_back_across_a_restart(tmp_path: Path) -> None:
    """The database file becomes a directory (unopenable, even for root); the service
    stops with records spooled; a new life replays them once the file is back."""
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    spool = tmp_path / "state" / "spool.jsonl"
    writer = await started_writer(Store.open(url, fleet="f", host="h"), spool)
    writer.store.engine.dispose()
    aside = tmp_path / "aside"
    aside.mkdir()
    moved = [p for p in tmp_path.glob("s.db*")]
    for p in moved:
        p.rename(aside / p.name)
    db.mkdir()
    try:
        for record in outage_records():
            writer.submit(record)
        await writer.close()                 # tries once more, fails, leaves the file
        assert len(spool.read_text().splitlines()) == len(outage_records())
    finally:
        db.rmdir()
        for p in moved:
            (aside / p.name).rename(p)
    store = Store.open(url, fleet="f", host="h")
    second = RecordWriter(store, spool_path=spool)
    assert second.spooled == len(outage_records())
    second.start()                           # replays what the earlier life left
    await second.flush()
    assert second.spooled == 0 and second.replayed == len(outage_records())
    assert_all_there_once(store)
    await second.close()


async def test_a_write_that_reached_the_database_is_not_replayed_twice(tmp_path: Path) -> None:
    """The commit landed but the error came anyway (connection lost before the answer):
    the record sits in the spool and in the database; the replay skips it by key."""
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    writer = await started_writer(store, tmp_path / "spool.jsonl")
    records = outage_records()
    for record in records[:4]:
        store.apply(record)                  # reached the database ...
    for record in records:
        writer.spool.append(record)          # ... and was spooled all the same
    writer.replay_spool()
    await writer.flush()
    assert (writer.replayed, writer.skipped_duplicates) == (len(records) - 4, 4)
    assert_all_there_once(store)
    await writer.close()


async def test_new_records_queue_behind_the_spool_to_keep_their_order(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    writer = await started_writer(store, tmp_path / "spool.jsonl")
    records = outage_records()
    writer.spool.append(records[0])          # an older record is waiting
    writer.retry_interval_seconds = 3600     # and the next retry is not due
    writer._last_attempt_s = writer._clock()
    for record in records[1:]:
        writer.submit(record)
    await writer.flush()
    assert writer.spooled == len(records)    # spooled behind it, none written ahead
    writer.replay_spool()
    await writer.flush()
    assert_all_there_once(store)
    await writer.close()


def test_records_that_can_never_apply_are_kept_aside(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    spool = Spool(tmp_path / "spool.jsonl")
    spool.append(UpdateRun(run_id="never-added", values={"outcome": "x"}))
    spool.append(StartService(service_run_id="s1", pid=1, boot_id=None, started_at=T0))
    with open(spool.path, "a") as f:
        f.write('{"type": "add_run", "key": "k", "run_id": "tru\n')   # a torn last line
    result = spool.replay(store.apply)
    assert (result.applied, result.rejected, result.remaining) == (1, 2, 0)
    rejected = spool.rejected_path.read_text().splitlines()
    assert "no engine run 'never-added'" in rejected[0] and "unreadable" in rejected[1]
    assert counts(store)["service_runs"] == 1
    store.close()


def test_an_unwritable_spool_holds_records_in_memory_in_order(tmp_path: Path) -> None:
    path = tmp_path / "spool.jsonl"
    spool = Spool(path)
    path.mkdir()                             # open(..., "a") fails, also for root
    records = outage_records()
    spool.append(records[0])
    spool.append(records[1])
    assert len(spool) == 2
    assert spool.replay(lambda r: True).remaining == 2    # unreadable: left alone
    path.rmdir()
    spool.append(records[2])                 # the held ones go first
    lines = path.read_text().splitlines()
    assert lines == [record_to_json(r) for r in records[:3]]


def test_over_its_size_the_spool_drops_telemetry_only(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.jsonl", max_bytes=1)
    records = outage_records(1)
    for record in records:
        spool.append(record)
    kinds = [r.kind for r in records]
    assert spool.dropped == kinds.count("add_telemetry") + kinds.count("service_heartbeat")
    assert len(spool) == len(records) - spool.dropped
    assert len(spool.path.read_text().splitlines()) == len(spool)


async def test_without_a_spool_a_refused_write_is_counted_lost(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    writer = RecordWriter(store)
    writer.start()
    writer.submit(UpdateRun(run_id="nope", values={}))
    writer.submit(UpdateRun(run_id="nope", values={"outcome": "crashed"}))
    await writer.flush()
    assert (writer.failed_writes, writer.lost_writes) == (2, 2)
    await writer.close()
    with pytest.raises(StoreError, match="no engine run 'nope'"):
        store.apply(UpdateRun(run_id="nope", values={}))
    assert os.path.exists(tmp_path / "s.db")


async def test_a_bug_while_writing_keeps_the_record_aside(tmp_path: Path, caplog) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    writer = await started_writer(store, tmp_path / "spool.jsonl")
    writer.submit(AddTelemetry(points=({"not": "a point"},)))     # TypeError inside
    writer.submit(StartService(service_run_id="s2", pid=2, boot_id=None, started_at=T0))
    await writer.flush()
    assert writer.rejected == 1 and "record writer: handling" in caplog.text
    (kept,) = [json.loads(line) for line in writer.spool.rejected_path.read_text().splitlines()]
    assert json.loads(kept["line"])["points"] == [{"not": "a point"}]
    assert counts(store)["service_runs"] == 2          # later records still written
    await writer.close()


def test_a_poison_record_in_the_spool_does_not_block_the_rest(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    spool = Spool(tmp_path / "spool.jsonl")
    spool.append(AddTelemetry(points=()))
    spool.append(StartService(service_run_id="s1", pid=1, boot_id=None, started_at=T0))

    def apply(record):
        if isinstance(record, AddTelemetry):
            raise RuntimeError("bug")
        return store.apply(record)

    result = spool.replay(apply)
    assert (result.applied, result.rejected, result.remaining) == (1, 1, 0)
    assert "RuntimeError('bug')" in spool.rejected_path.read_text()
    store.close()


async def test_a_database_unreachable_at_start_is_migrated_when_it_comes(tmp_path: Path) -> None:
    """The service starts while its database cannot be opened: with ``lazy`` the Store
    still opens, every record waits in the spool, and the first replay that reaches the
    database migrates it and writes them all."""
    db = tmp_path / "s.db"
    db.mkdir()                               # not openable as a database, even for root
    with pytest.raises(StoreError):
        Store.open(f"sqlite:///{db}", fleet="f", host="h")
    store = Store.open(f"sqlite:///{db}", fleet="f", host="h", lazy=True)
    writer = RecordWriter(store, spool_path=tmp_path / "spool.jsonl", retry_interval_seconds=0)
    writer.start()
    first = [AddRun(run_id="r1", mode="fast", rung=0, argv=["vllm"], pid=1, port=8000,
                    log_path="/l", started_at=T0),
             StartService(service_run_id="s1", pid=1, boot_id="b", started_at=T0)]
    for record in first + outage_records():
        writer.submit(record)
    await writer.flush()
    assert writer.spooled == len(first) + len(outage_records())
    db.rmdir()
    writer.replay_spool()
    await writer.flush()
    assert writer.spooled == 0
    assert_all_there_once(store)
    await writer.close()


POISON_LINES = [
    '{"type":"start_service","key":"p1","service_run_id":"x","pid":1,"boot_id":null,'
    '"started_at":{"$dt":5}}',                                    # TypeError in the hook
    '[' * 100_000,                                                # RecursionError
    '{"type":"start_service","key":"p3","service_run_id":"x","pid":"abc","boot_id":null,'
    '"started_at":{"$dt":"2026-11-30T08:00:00+00:00"}}',          # wrong field type
    '{"type":"add_incident","key":"p4","incident":"not an object"}',
    '{"type":["start_service"]}',
]


@pytest.mark.parametrize("poison", POISON_LINES, ids=range(len(POISON_LINES)))
def test_issue_17_a_poison_line_is_rejected_and_20_later_records_replay(
        tmp_path: Path, poison: str) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    path = tmp_path / "spool.jsonl"
    good = [StartService(service_run_id=f"s{i}", pid=i, boot_id=None, started_at=T0)
            for i in range(20)]
    path.write_text(poison + "\n" + "".join(record_to_json(r) + "\n" for r in good))
    result = Spool(path).replay(store.apply)
    assert (result.applied, result.rejected, result.remaining) == (20, 1, 0)
    assert counts(store)["service_runs"] == 20
    (kept,) = [json.loads(x) for x in path.with_name("spool.rejected.jsonl").read_text()
               .splitlines()]
    assert kept["line"] == poison and kept["error"].startswith("unreadable")
    store.close()


def test_issue_17_a_torn_last_line_is_cut_on_open(tmp_path: Path) -> None:
    """A life killed mid-append left half a line; the next life's first record must not
    be glued onto it."""
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    path = tmp_path / "spool.jsonl"
    first = StartService(service_run_id="s1", pid=1, boot_id=None, started_at=T0)
    torn = record_to_json(StartService(service_run_id="s9", pid=9, boot_id=None,
                                       started_at=T0))[:40]
    path.write_text(record_to_json(first) + "\n" + torn)
    spool = Spool(path)
    assert spool.torn_cut == len(torn) and len(spool) == 1
    spool.append(StartService(service_run_id="s2", pid=2, boot_id=None, started_at=T0))
    result = spool.replay(store.apply)
    assert (result.applied, result.rejected) == (2, 0)
    (kept,) = [json.loads(x) for x in spool.rejected_path.read_text().splitlines()]
    assert kept == {"error": "torn last line, cut on open", "line": torn}
    store.close()


def test_issue_17_the_rejected_file_rotates(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.jsonl", rejected_max_bytes=1000)
    for i in range(30):
        spool.reject("x" * 100, f"reason {i}")
    assert spool.rejected_path.stat().st_size < 1000 + 200
    older = spool.rejected_path.with_name(spool.rejected_path.name + ".1")
    assert older.exists() and "reason" in older.read_text()
    assert "reason 29" in spool.rejected_path.read_text()


def test_issue_17_spool_files_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        spool = Spool(tmp_path / "spool.jsonl")
        spool.append(StartService(service_run_id="s", pid=1, boot_id=None, started_at=T0))
        spool.reject("x", "y")
    finally:
        os.umask(old)
    assert spool.path.stat().st_mode & 0o777 == 0o600
    assert spool.rejected_path.stat().st_mode & 0o777 == 0o600

"""``RecordWriter``: applies records in order, off the event loop, and never loses one.

The decision loop never waits on the database: it submits a record and moves on. One
task applies the records one after another in a worker thread, so a run is always
added before it is updated, and an incident before the transition that points at it.

When the database is unavailable (server down, "database is locked", read-only or
missing file, disk full) the record goes to the spool file, and so does every record
after it while the spool is not empty, which keeps the order. A replay re-applies the
spool oldest first: on the next record after ``retry_interval_seconds``, on
``replay_spool()`` (the service's timer), at ``start()`` and at ``close()``. Records
carry idempotency keys, so nothing is written twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_supervisor.errors import StoreError
from agent_supervisor.record.database import is_unavailable
from agent_supervisor.record.records import Record, record_to_json
from agent_supervisor.record.spool import DEFAULT_MAX_SPOOL_BYTES, Spool
from agent_supervisor.record.store import Store

__all__ = ["RecordWriter"]

logger = logging.getLogger(__name__)

#: How often a record arriving while the spool is not empty retries the database:
#: often enough to catch up within seconds of a restart, rarely enough that a database
#: answering each attempt only after a timeout (SQLite's busy timeout, a TCP connect)
#: does not turn the writer into a queue of timeouts.
DEFAULT_RETRY_INTERVAL_SECONDS = 5.0

_REPLAY = object()
_STOP = object()


class RecordWriter:
    """Serial, asynchronous, spooled writes to a ``Store``.

    ``submit(record)`` queues a record (``agent_supervisor.record.records``) and returns at
    once; ``flush()`` waits until every queued record was written or spooled. Without
    ``spool_path`` a record the database refuses is logged and lost (tests, one-shot
    commands).
    """

    def __init__(self, store: Store, *, spool_path: Path | None = None,
                 max_spool_bytes: int = DEFAULT_MAX_SPOOL_BYTES,
                 retry_interval_seconds: float = DEFAULT_RETRY_INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.spool = Spool(spool_path, max_bytes=max_spool_bytes) if spool_path else None
        self.retry_interval_seconds = retry_interval_seconds
        self._clock = clock
        self._last_attempt_s: float | None = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.failed_writes = 0
        """Writes the database refused (each then spooled, rejected or, without a spool,
        lost)."""
        self.lost_writes = 0
        self.replayed = 0
        self.skipped_duplicates = 0
        self.rejected = 0

    @property
    def spooled(self) -> int:
        """Records waiting in the spool right now."""
        return len(self.spool) if self.spool is not None else 0

    def start(self) -> None:
        """Start the writer task on the running loop; replay what an earlier life left
        in the spool first."""
        self._task = asyncio.get_running_loop().create_task(self._drain())
        if self.spooled:
            logger.info("spool %s holds %d records from before: replaying",
                        self.spool.path if self.spool else None, self.spooled)
            self.replay_spool()

    def submit(self, record: Record) -> None:
        """Queue ``record``; it is applied after every earlier one."""
        self._queue.put_nowait(record)

    def replay_spool(self) -> None:
        """Queue a replay of the spool (the service's timer calls this, e.g. every 30 s)."""
        self._queue.put_nowait(_REPLAY)

    async def flush(self) -> None:
        """Wait until every record queued so far was written, spooled or rejected."""
        await self._queue.join()

    async def close(self) -> None:
        """Flush, try the spool once more, stop the writer task and close the store."""
        if self.spooled:
            self.replay_spool()
        await self.flush()
        self._queue.put_nowait(_STOP)
        if self._task is not None:
            await self._task
        self.store.close()

    async def _drain(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if item is _STOP:
                    return
                await asyncio.to_thread(self._handle, item)
            except Exception as exc:
                # A bug here must not stop every later write, nor lose this record.
                logger.exception("record writer: handling %r failed", item)
                if isinstance(item, Record) and self.spool is not None:
                    self.rejected += 1
                    self.spool.reject(record_to_json(item), repr(exc))
            finally:
                self._queue.task_done()

    def _handle(self, item: Any) -> None:
        """Runs in the worker thread."""
        if item is _REPLAY:
            self._replay()
        else:
            self._write(item)

    def _write(self, record: Record) -> None:
        if self.spool is not None and len(self.spool):
            self.spool.append(record)
            now = self._clock()
            if self._last_attempt_s is None or \
                    now - self._last_attempt_s >= self.retry_interval_seconds:
                self._replay()
            return
        try:
            self.store.apply(record)
        except StoreError as exc:
            self.failed_writes += 1
            if self.spool is None:
                self.lost_writes += 1
                logger.error("store write %s failed, no spool: lost %s (%s)", record.kind,
                             record_to_json(record), exc)
            elif is_unavailable(exc):
                self._last_attempt_s = self._clock()
                self.spool.append(record)
                logger.warning("database unavailable, %s spooled to %s: %s", record.kind,
                               self.spool.path, exc)
            else:
                self.rejected += 1
                self.spool.reject(record_to_json(record), str(exc))

    def _replay(self) -> None:
        if self.spool is None or not len(self.spool):
            return
        self._last_attempt_s = self._clock()
        result = self.spool.replay(self.store.apply)
        self.replayed += result.applied
        self.skipped_duplicates += result.skipped
        self.rejected += result.rejected
        if result.applied or result.skipped or result.rejected:
            logger.info("spool %s replayed: %d written, %d already there, %d rejected, "
                        "%d still waiting", self.spool.path, result.applied, result.skipped,
                        result.rejected, result.remaining)
        else:
            logger.debug("spool %s: database still unavailable, %d waiting",
                         self.spool.path, result.remaining)

"""``RecordWriter``: applies store writes in order, off the event loop.

The decision loop never waits on the database: it submits a write and moves on. One
task runs the writes one after another in a worker thread, so a run is always added
before it is updated, and an incident before the transition that points at it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from supervisor.errors import StoreError
from supervisor.record.store import Store

__all__ = ["RecordWriter"]

logger = logging.getLogger(__name__)


class RecordWriter:
    """Serial, asynchronous writes to a ``Store``.

    ``submit(fn)`` queues ``fn(store)`` and returns at once; ``flush()`` waits until every
    queued write has been tried. A write the database refuses is logged with what was
    lost (a later issue adds the on-disk spool that keeps it).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: asyncio.Queue[Callable[[Store], Any] | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.failed_writes = 0

    def start(self) -> None:
        """Start the writer task on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._drain())

    def submit(self, fn: Callable[[Store], Any]) -> None:
        """Queue ``fn(store)``; it runs in a worker thread after every earlier write."""
        self._queue.put_nowait(fn)

    async def flush(self) -> None:
        """Wait until every write queued so far has been tried."""
        await self._queue.join()

    async def close(self) -> None:
        """Flush, stop the writer task and close the store."""
        await self.flush()
        self._queue.put_nowait(None)
        if self._task is not None:
            await self._task
        self.store.close()

    async def _drain(self) -> None:
        while True:
            fn = await self._queue.get()
            try:
                if fn is None:
                    return
                await asyncio.to_thread(fn, self.store)
            except StoreError as exc:
                self.failed_writes += 1
                logger.error("store write %s failed: %s", getattr(fn, "__name__", fn), exc)
            finally:
                self._queue.task_done()

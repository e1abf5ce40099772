"""Issue 19 (found running the levers on the real CPU engine beside other supervisors):
the /dev/shm clean-up after an engine run must not remove a semaphore another live
process uses. glibc maps a semaphore under a temporary name, so /proc/PID/maps shows
``/dev/shm/sem.XXXXXX (deleted)``; the files are matched by inode instead."""

from __future__ import annotations

import multiprocessing
import os
import uuid
from pathlib import Path

from agent_supervisor.act.processes import SHM_DIR, remove_stale_shm, shm_snapshot


def _take(lock) -> None:
    with lock:
        pass


def test_issue_19_a_live_semaphore_survives_the_clean_up_and_an_orphan_does_not() -> None:
    before = shm_snapshot()
    ctx = multiprocessing.get_context("spawn")
    lock = ctx.Lock()                                   # what vLLM's processes share
    sem = "sem." + lock._semlock.name.lstrip("/")
    assert (SHM_DIR / sem).exists()
    maps = Path("/proc/self/maps").read_text()
    assert f"/dev/shm/{sem}" not in maps                # mapped under another name
    orphan = SHM_DIR / f"psm_{uuid.uuid4().hex[:8]}"    # left by a killed engine
    orphan.write_bytes(b"\0" * 64)
    try:
        removed = remove_stale_shm(before)
        assert orphan.name in removed and not orphan.exists()
        assert sem not in removed and (SHM_DIR / sem).exists()
        child = ctx.Process(target=_take, args=(lock,))  # a worker rebuilding the lock
        child.start()
        child.join(60)
        assert child.exitcode == 0
    finally:
        orphan.unlink(missing_ok=True)
        del lock
    assert os.path.isdir(SHM_DIR)

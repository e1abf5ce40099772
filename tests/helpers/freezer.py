"""Processes that survive SIGKILL, made for real with the kernel's cgroup v1 freezer.

A task in a FROZEN freezer cgroup does not run, not even to die: SIGKILL stays pending,
``ps`` shows it in state D, until the cgroup is THAWED (Linux
Documentation/admin-guide/cgroup-v1/freezer-subsystem.rst: "frozen tasks ... will not
respond to signals until thawed"). That is what a process stuck in the GPU driver looks
like to the supervisor (vllm-project/vllm#25127). Needs root and a cgroup v1 freezer
hierarchy; ``Freezer.available()`` says whether this machine has them.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path

ROOT = Path("/sys/fs/cgroup/freezer")


class Freezer:
    """One freezer cgroup of its own; ``freeze(pids)``, ``thaw()``, ``remove()``."""

    def __init__(self) -> None:
        self.path = ROOT / f"supervisor-test-{uuid.uuid4().hex[:8]}"

    @staticmethod
    def available() -> bool:
        return os.geteuid() == 0 and (ROOT / "tasks").exists() and os.access(ROOT, os.W_OK)

    def freeze(self, *pids: int) -> None:
        self.path.mkdir()
        for pid in pids:
            (self.path / "tasks").write_text(str(pid))
        (self.path / "freezer.state").write_text("FROZEN")
        deadline = time.monotonic() + 5
        while (self.path / "freezer.state").read_text().strip() != "FROZEN":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.path} did not freeze")
            time.sleep(0.01)

    def thaw(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.path / "freezer.state").write_text("THAWED")

    def remove(self) -> None:
        self.thaw()
        deadline = time.monotonic() + 5
        while self.path.exists():
            try:
                self.path.rmdir()
            except OSError:          # tasks still leaving it
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

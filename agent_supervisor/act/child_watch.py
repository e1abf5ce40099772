"""Watching the engine's children die, the moment they do: one pidfd each (Linux >= 5.3).

The API server notices a dead EngineCore only after about 0.6 s and then exits 0 (while
it starts, it may keep waiting for it for good: RBLN-SW/vllm-rbln#1000); a pidfd per child
wakes the launcher at once instead. Used by ``agent_supervisor.act.launcher`` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import Any

import psutil

__all__ = ["ChildWatch"]


class ChildWatch:
    """pidfds on the children of one process tree; ``on_exit(run, pid, title)`` is called
    on the event loop when one of them exits. Not thread-safe: one asyncio loop."""

    def __init__(self, on_exit: Callable[[Any, int, str], None]) -> None:
        self._on_exit = on_exit
        self._fds: dict[int, int] = {}

    def watch(self, run: Any, root_pid: int | None, *, titled_only: bool = False) -> None:
        """Watch every child of ``root_pid`` not watched yet; ``titled_only``: only the
        ``VLLM::`` ones (a start's compile jobs and resource tracker come and go)."""
        if root_pid is None or not hasattr(os, "pidfd_open"):
            return
        loop = asyncio.get_running_loop()
        try:
            children = psutil.Process(root_pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for child in children:
            if child.pid in self._fds:
                continue
            try:
                title = (child.cmdline() or [""])[0]
                if titled_only and not title.startswith("VLLM::"):
                    continue
                fd = os.pidfd_open(child.pid)
            except (OSError, psutil.Error):
                continue
            self._fds[child.pid] = fd
            loop.add_reader(fd, self._fired, run, child.pid, title)

    def _fired(self, run: Any, pid: int, title: str) -> None:
        fd = self._fds.pop(pid, None)
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)
        self._on_exit(run, pid, title)

    def clear(self) -> None:
        """Stop watching (close every pidfd)."""
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            for fd in self._fds.values():
                loop.remove_reader(fd)
                os.close(fd)
        self._fds.clear()

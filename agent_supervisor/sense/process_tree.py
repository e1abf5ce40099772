"""Read the engine's process tree from /proc (through psutil). Observation only."""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from agent_supervisor.sense.names import PROCESS_TITLES

__all__ = ["ProcessTree", "read_process_tree"]


@dataclass(frozen=True, slots=True)
class ProcessTree:
    """The API server and everything under it at one instant.

    Memory in bytes. RSS counts shared pages in every process that maps them; PSS
    (``/proc/PID/smaps_rollup``) splits them, so summed PSS is the tree's real share.
    PSS is None when a process's smaps cannot be read (another user's process).
    """

    api_server_alive: bool
    engine_core_alive: bool
    processes: int
    rss_bytes: int
    pss_bytes: int | None = None
    api_server_rss_bytes: int | None = None
    engine_core_rss_bytes: int | None = None
    workers_rss_bytes: int | None = None
    pids: tuple[int, ...] = ()
    cpu_seconds: float | None = None
    """User + system CPU seconds of the live processes, with those of children they reaped
    (compile jobs of a start): grows while a start works, flat while it waits."""


def _title(proc: psutil.Process) -> str:
    cmdline = proc.cmdline()
    return cmdline[0] if cmdline else proc.name()


def read_process_tree(pid: int, *, pss: bool = False) -> ProcessTree:
    """Walk the API server ``pid`` and its descendants.

    Returns: liveness of the API server (a zombie counts as dead) and of a
    ``VLLM::EngineCore*`` descendant, the number of live processes, summed RSS, and per
    role (API server, EngineCore, ``VLLM::Worker*``) the RSS; with ``pss=True`` also the
    summed PSS (costs one smaps_rollup read per process; None when one process's smaps
    cannot be read, e.g. an engine running as another user, which still counts in the
    RSS and liveness). Processes that vanish during the walk are skipped.
    """
    try:
        root = psutil.Process(pid)
        if root.status() == psutil.STATUS_ZOMBIE:
            return ProcessTree(False, False, 0, 0)
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ProcessTree(False, False, 0, 0)
    core = False
    rss = core_rss = workers_rss = 0
    api_rss: int | None = None
    pss_total: int | None = 0 if pss else None
    pids = []
    cpu = 0.0
    for proc in procs:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            title = _title(proc)
            mem = proc.memory_info().rss
            t = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        cpu += t.user + t.system + t.children_user + t.children_system
        if pss_total is not None:
            # smaps can be unreadable (another user's engine) while the process is
            # still counted: PSS of the tree is then unknown, not smaller.
            try:
                pss_total += proc.memory_full_info().pss
            except psutil.AccessDenied:
                pss_total = None
            except psutil.NoSuchProcess:
                continue
        pids.append(proc.pid)
        rss += mem
        if proc is root:
            api_rss = mem
        elif title.startswith(PROCESS_TITLES["engine_core"]):
            core = True
            core_rss += mem
        elif title.startswith(PROCESS_TITLES["worker"]):
            workers_rss += mem
    return ProcessTree(True, core, len(pids), rss, pss_total, api_rss,
                       core_rss if core else None, workers_rss or None, tuple(pids),
                       round(cpu, 3))

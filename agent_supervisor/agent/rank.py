"""``LocalRank``: the one headless engine rank of this node, started and stopped on the
head's orders and killed by the agent itself at the memory floor.

The rank runs in a session of its own (its pid is its process group), or, with
``engine.runtime: container``, as a container of its own (``act/container.py``: its members
are its cgroup's processes, SIGKILLed from the host; the container is removed after), with
its output appended to ``<state>/logs/rank-<run id>.log``. States: ``stopped`` (never started, or
stopped on request), ``running``, ``exited`` (ended without being asked: a crash, whatever
the status), ``killed`` (the agent killed it: ``killed_reason``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from agent_supervisor.act.container import (
    ContainerEngine,
    ContainerHandle,
    cgroup_members,
    kill_members,
)
from agent_supervisor.act.engine_env import HOST_ONLY
from agent_supervisor.act.engine_runtime import wait_pid_gone
from agent_supervisor.act.processes import group_members, kill_group, read_leftovers
from agent_supervisor.errors import EngineStartError
from agent_supervisor.sense.log_tail import LogTail

__all__ = ["LocalRank"]

logger = logging.getLogger(__name__)


class LocalRank:
    """Owns the node's rank process. Use from one asyncio loop."""

    def __init__(self, state_dir: Path, *, kill_timeout_s: float,
                 containers: ContainerEngine | None = None) -> None:
        self.state_dir = state_dir
        self.containers = containers
        self._container: ContainerHandle | None = None
        self._running = False
        self.kill_timeout_s = kill_timeout_s
        self.state = "stopped"
        self.run_id: str | None = None
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.killed_reason: str | None = None
        self.kill_evidence: dict[str, Any] | None = None
        self.mem_available_before_bytes: int | None = None
        self.log_tail: LogTail | None = None
        self.argv: list[str] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._asked = False
        self._watch: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        """Whether the rank's process runs now."""
        if self._container is not None:
            return self._running
        return self._proc is not None and self._proc.returncode is None

    def _members(self) -> list[int]:
        if self._container is not None:
            return cgroup_members(self._container)
        return [] if self.pid is None else group_members(self.pid)

    def _kill_all(self) -> None:
        if self._container is not None:
            kill_members(self._container)
        elif self.pid is not None:
            kill_group(self.pid)

    async def _start_container(self, argv: list[str], env: dict[str, str], run_id: str,
                               log: Path) -> int:
        assert self.containers is not None
        env = {k: v for k, v in env.items() if k not in HOST_ONLY}
        log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle = await asyncio.to_thread(self.containers.run, run_id=run_id, mode="rank",
                                         argv=argv, env=env, log_path=log)
        if handle.pid is None:
            raise EngineStartError(f"rank container {handle.name} is not running after start")
        self._container, self._proc, self._running = handle, None, True
        self._watch = asyncio.get_running_loop().create_task(self._wait_container(handle))
        return handle.pid

    async def _wait_container(self, handle: ContainerHandle) -> None:
        await wait_pid_gone(handle.pid)
        assert self.containers is not None
        code, _ = await asyncio.to_thread(self.containers.wait, handle.id, 5.0)
        if handle is not self._container:
            return
        self._running = False
        rc = None if code is None else (-(code - 128) if 128 < code < 160 else code)
        self.exit_code, self.exit_signal = (None, -rc) if rc is not None and rc < 0 \
            else (rc, None)
        if not self._asked:
            self.state = "exited"
            logger.warning("rank run %s exited unasked (status %s)", self.run_id, code)

    async def start(self, argv: list[str], env: dict[str, str], *, cwd: Path, run_id: str,
                    mem_available_bytes: int | None) -> int:
        """Spawn ``argv`` (no shell) in a new session; returns its pid.
        Raises EngineStartError when a rank runs already or the spawn fails."""
        if self.alive:
            raise EngineStartError(f"a rank runs already (pid {self.pid}, run {self.run_id})",
                                   engine_pid=self.pid)
        log = self.state_dir / "logs" / f"rank-{run_id}.log"
        self._asked, self._container = False, None
        if self.containers is not None:
            pid = await self._start_container(argv, env, run_id, log)
        else:
            pid = await self._spawn(argv, env, cwd, log)
        self.pid, self.run_id, self.argv = pid, run_id, argv
        self.state = "running"
        self.exit_code = self.exit_signal = None
        self.killed_reason, self.kill_evidence = None, None
        self.mem_available_before_bytes = mem_available_bytes
        self.log_tail = LogTail(log)
        where = f", container {self._container.name}" if self._container else ""
        logger.info("rank run %s: pid %d%s, argv %s", run_id, pid, where, " ".join(argv))
        return pid

    async def _spawn(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> int:
        try:
            log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with open(fd, "ab") as out:
                proc = await asyncio.create_subprocess_exec(
                    *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                    stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise EngineStartError(f"cannot start the rank: {exc.strerror or exc}") from exc
        self._proc = proc
        self._watch = asyncio.get_running_loop().create_task(self._wait(proc))
        return proc.pid

    async def _wait(self, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if proc is not self._proc:
            return
        self.exit_code, self.exit_signal = (None, -code) if code < 0 else (code, None)
        if not self._asked:
            self.state = "exited"
            logger.warning("rank run %s exited unasked (status %s)", self.run_id, code)

    async def stop(self, *, grace_s: float, reason: str) -> list[int]:
        """1. SIGTERM to the rank; 2. wait up to ``grace_s``; 3. SIGKILL its group; 4. wait up
        to ``kill_timeout_s`` for every member to vanish. Returns the pids still alive."""
        if self.pid is None:
            return []
        self._asked = True
        if self.alive:
            logger.info("rank run %s: stopping (%s)", self.run_id, reason)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            if self._watch is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._watch), grace_s)
        survivors = await self._reap()
        if self.state != "killed":
            self.state = "stopped"
        return survivors

    async def kill(self, *, reason: str, evidence: dict[str, Any] | None = None) -> list[int]:
        """SIGKILL the rank's whole group now (the agent's own floor kill, or the head's
        emergency). Returns the pids still alive after ``kill_timeout_s``."""
        if self.pid is None:
            return []
        self._asked = True
        if self.alive or self._members():
            self.state, self.killed_reason, self.kill_evidence = "killed", reason, evidence
            logger.warning("rank run %s: SIGKILL to %s (%s)", self.run_id,
                           f"container {self._container.name}" if self._container
                           else f"group {self.pid}", reason)
        return await self._reap()

    async def _reap(self) -> list[int]:
        self._kill_all()
        deadline = time.monotonic() + self.kill_timeout_s
        survivors = self._members()
        while (survivors or self.alive) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            self._kill_all()
            survivors = self._members()
        if self._watch is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._watch), 1.0)
        if self._container is not None and not survivors and self.containers is not None:
            with contextlib.suppress(EngineStartError):      # ContainerError: logged below
                await asyncio.to_thread(self.containers.remove, self._container.id)
        return survivors

    def leftovers(self) -> tuple[int, ...] | None:
        """Live pids of the rank's group once it no longer runs (() none; None: no rank)."""
        if self.pid is None:
            return None
        if self.alive:
            return ()
        if self._container is not None:
            return tuple(read_leftovers(pids=self._members()).pids)
        return tuple(read_leftovers(self.pid).pids)

    async def close(self) -> None:
        """Kill the rank (the agent is going away: no orphan rank holding memory)."""
        if self.alive:
            await self.kill(reason="agent stopping")

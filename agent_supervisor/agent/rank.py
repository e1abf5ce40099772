"""``LocalRank``: the one headless engine rank of this node, started and stopped on the
head's orders and killed by the agent itself at the memory floor.

The rank runs in a session of its own (its pid is its process group) with its output
appended to ``<state>/logs/rank-<run id>.log``. States: ``stopped`` (never started, or
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

from agent_supervisor.act.logtail import LogTail
from agent_supervisor.act.processes import group_members, kill_group, read_leftovers
from agent_supervisor.errors import EngineStartError

__all__ = ["LocalRank"]

logger = logging.getLogger(__name__)


class LocalRank:
    """Owns the node's rank process. Use from one asyncio loop."""

    def __init__(self, state_dir: Path, *, kill_timeout_s: float) -> None:
        self.state_dir = state_dir
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
        return self._proc is not None and self._proc.returncode is None

    async def start(self, argv: list[str], env: dict[str, str], *, cwd: Path, run_id: str,
                    mem_available_bytes: int | None) -> int:
        """Spawn ``argv`` (no shell) in a new session; returns its pid.
        Raises EngineStartError when a rank runs already or the spawn fails."""
        if self.alive:
            raise EngineStartError(f"a rank runs already (pid {self.pid}, run {self.run_id})",
                                   engine_pid=self.pid)
        log = self.state_dir / "logs" / f"rank-{run_id}.log"
        try:
            log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with open(fd, "ab") as out:
                proc = await asyncio.create_subprocess_exec(
                    *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                    stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise EngineStartError(f"cannot start the rank: {exc.strerror or exc}") from exc
        self._proc, self.pid, self.run_id, self.argv = proc, proc.pid, run_id, argv
        self.state, self._asked = "running", False
        self.exit_code = self.exit_signal = None
        self.killed_reason, self.kill_evidence = None, None
        self.mem_available_before_bytes = mem_available_bytes
        self.log_tail = LogTail(log)
        self._watch = asyncio.get_running_loop().create_task(self._wait(proc))
        logger.info("rank run %s: pid %d, argv %s", run_id, proc.pid, " ".join(argv))
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
        if self._proc is None:
            return []
        self._asked = True
        if self.alive:
            logger.info("rank run %s: stopping (%s)", self.run_id, reason)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._proc.wait()), grace_s)
        survivors = await self._reap()
        if self.state != "killed":
            self.state = "stopped"
        return survivors

    async def kill(self, *, reason: str, evidence: dict[str, Any] | None = None) -> list[int]:
        """SIGKILL the rank's whole group now (the agent's own floor kill, or the head's
        emergency). Returns the pids still alive after ``kill_timeout_s``."""
        if self._proc is None:
            return []
        self._asked = True
        if self.alive or group_members(self._proc.pid):
            self.state, self.killed_reason, self.kill_evidence = "killed", reason, evidence
            logger.warning("rank run %s: SIGKILL to group %d (%s)", self.run_id,
                           self._proc.pid, reason)
        return await self._reap()

    async def _reap(self) -> list[int]:
        assert self._proc is not None
        pgid = self._proc.pid
        kill_group(pgid)
        deadline = time.monotonic() + self.kill_timeout_s
        survivors = group_members(pgid)
        while (survivors or self.alive) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            kill_group(pgid)
            survivors = group_members(pgid)
        if self._watch is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._watch), 1.0)
        return survivors

    def leftovers(self) -> tuple[int, ...] | None:
        """Live pids of the rank's group once it no longer runs (() none; None: no rank)."""
        if self._proc is None:
            return None
        if self.alive:
            return ()
        return tuple(read_leftovers(self._proc.pid).pids)

    async def close(self) -> None:
        """Kill the rank (the agent is going away: no orphan rank holding memory)."""
        if self.alive:
            await self.kill(reason="agent stopping")

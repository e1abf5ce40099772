"""``EngineRun``: one launch of the engine, as the launcher keeps it; run ids and the
run's private TMPDIR."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from agent_supervisor.act.stack_dump import StackDump
from agent_supervisor.sense.log_tail import LogTail
from agent_supervisor.states import CrashReason

__all__ = ["EngineRun", "new_run_id", "utcnow"]


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_run_id() -> str:
    """A sortable, readable id for one engine run: ``20261129T211530-3fa2``."""
    return utcnow().strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(2)


@dataclass
class EngineRun:
    """One launch of the engine, from spawn to the moment its group is gone.

    Times: ``*_s`` monotonic seconds, ``*_at`` UTC datetimes.
    """

    run_id: str
    rung: int
    mode: str
    argv: list[str]
    log_path: Path
    tmp_dir: Path
    started_s: float
    started_at: datetime
    pid: int | None = None
    ready_s: float | None = None
    ready_at: datetime | None = None
    exited_s: float | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    planned_stop: bool = False
    crash_reason: CrashReason | None = None
    error: str | None = None
    """Why the spawn failed, when it did."""
    kill_reason: str | None = None
    """Why the supervisor killed it on purpose (an emergency), if it did."""
    mem_available_before_bytes: int | None = None
    """MemAvailable just before the spawn (the next start waits until it is back)."""
    processes_rss_before_bytes: int | None = None
    """Summed RSS of every process just before the spawn (others' growth is allowed for)."""
    start_args: tuple[tuple[str, object], ...] = ()
    """Start-up fallback flags this run was launched with (over the mode's arguments)."""
    sigterm_ignored: bool = False
    """The stop had to SIGKILL the group: it outlived SIGTERM past the grace."""
    shm_before: set[str] | None = field(default_factory=set, repr=False)
    """/dev/shm leftovers-to-be before the start; None: unknown (not read), so nothing
    is removed after the run."""
    container_id: str | None = None
    """The engine's container (``engine.runtime: container``), None for a process."""
    container_name: str | None = None
    oom_killed: bool | None = None
    """The container engine's OOMKilled flag at exit (a cgroup limit); None: unknown."""
    log_tail: LogTail | None = field(default=None, repr=False)
    stacks: StackDump | None = field(default=None, repr=False)
    """Its processes' stacks read before the kill (a hang, an ignored SIGTERM), until an
    incident carries them (``act/stack_dump.py``)."""
    """The newest lines of ``log_path`` in memory; ``poll()`` it to catch up."""

    @property
    def pgid(self) -> int | None:
        """The engine's process group: the API server was started as a session leader."""
        return self.pid

    @property
    def startup_seconds(self) -> float | None:
        """Seconds from spawn to the first /health 200, if it got there."""
        return None if self.ready_s is None else self.ready_s - self.started_s

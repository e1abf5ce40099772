"""The engine's lifecycle states, shared by the launcher (which owns them) and the Sample.

::

    stopped --start()--> starting --/health 200--> ready
       ^                    |  \\                      |
       |            exit or deadline  \\--stop()--> stopping --group gone--> stopped
       |                    v                          ^
       +--kill()/stop()-- crashed <--any exit not asked for (whatever the status)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CrashReason", "EngineState", "EngineStatus"]


class EngineState(StrEnum):
    """Where the engine process is in its life, as the launcher sees it."""

    STOPPED = "stopped"
    """No engine process of ours exists."""
    STARTING = "starting"
    """Spawned; ``/health`` has not answered 200 yet."""
    READY = "ready"
    """``/health`` answered 200 once; from here on liveness comes from the process tree
    and progress, since vLLM's /health stays 200 while the engine is hung."""
    STOPPING = "stopping"
    """A stop the supervisor asked for is in progress (SIGTERM, drain, SIGKILL)."""
    CRASHED = "crashed"
    """Gone or failing without being asked: any unplanned exit (vLLM exits 0 after its
    EngineCore died), a failed spawn, or a missed start deadline. Leftover processes may
    still exist until the launcher's ``kill()`` runs."""


class CrashReason(StrEnum):
    """Why a run ended up CRASHED; stored with the run and its incident."""

    EXITED = "exited"
    """The API server exited without being asked to (any status, 0 included)."""
    START_FAILED = "start_failed"
    """It exited before ever becoming ready (bad argument, model not found, OOM at load)."""
    START_TIMEOUT = "start_timeout"
    """The start made no progress for its budget (``agent_supervisor.decide.guards.startup``:
    no log line, no CPU work, no memory growth for ``engine.start_timeout_seconds`` or the
    mode's learned budget); the launcher itself never times a start out."""
    SPAWN_FAILED = "spawn_failed"
    """The process could not be created (no such executable, port already in use)."""
    SPAWN_RESOURCES = "spawn_resources"
    """The process could not be created because the supervisor or the box ran out of
    file descriptors, memory or processes (EMFILE, ENFILE, ENOMEM, EAGAIN): a fact about
    the box, retried after a delay and never counted as a crash of the mode."""
    RUNTIME_UNAVAILABLE = "runtime_unavailable"
    """The container engine's API could not be reached (no socket, service down): a fact
    about the box, retried after a delay and never counted as a crash of the mode."""
    ENGINE_CORE_DIED = "engine_core_died"
    """The ``VLLM::EngineCore`` child vanished while the API server lived on."""
    ENGINE_HUNG = "engine_hung"
    """Requests waited on a flat heartbeat and a failed canary: killed as hung."""


@dataclass(frozen=True, slots=True)
class EngineStatus:
    """A snapshot of the launcher for the sensors (no live handles in it).

    ``since_s`` is the monotonic time of the last state change.
    """

    state: EngineState
    since_s: float
    run_id: str | None = None
    rung: int | None = None
    pid: int | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    crash_reason: str | None = None
    was_ready: bool | None = None
    """Whether the run ever answered /health 200."""
    sigterm_ignored: bool | None = None
    """Its stop needed SIGKILL after the SIGTERM grace."""
    mem_available_before_bytes: int | None = None
    """MemAvailable read just before the launch."""
    processes_rss_before_bytes: int | None = None
    """Summed RSS of every process on the box just before the launch."""
    cgroup_memory_bytes: int | None = None
    """The memory the engine's container's cgroup charges (``engine.runtime: container``);
    None for a process engine or when it cannot be read."""

"""The container runtime's values: handles, inspected states, names, labels.

``ContainerHandle`` is what the host needs to watch and SIGKILL a container without its API
(``cgroup_members``, ``kill_members``: its cgroup files, ``act/cgroups.py``);
``ContainerInfo`` is a container as ``GET /containers/{id}/json`` reports it (Docker
Engine API; podman's compat API gives the same fields: ``State.Status``, ``State.Pid``,
``State.ExitCode``, ``State.OOMKilled``, ``State.StartedAt``, ``Config.Labels``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_supervisor.act.cgroups import live_pids, read_procs, sigkill_pids

__all__ = ["LABEL_PREFIX", "ContainerHandle", "ContainerInfo", "argv_digest",
           "cgroup_members", "container_name", "info_from", "kill_members"]

LABEL_PREFIX = "io.agent-supervisor."
#: States in which a container's exit status is final (podman's compat API says
#: ``exited``; its own ``stopped`` and Docker's ``dead`` mean the same here).
_ENDED = ("exited", "stopped", "dead")


@dataclass(frozen=True)
class ContainerHandle:
    """What the host needs to watch and kill a started container without the API."""

    id: str
    name: str
    pid: int | None
    """The host pid of the container's init (``State.Pid``: the engine's API server when
    the command is the engine's); None when the container is not running."""
    cgroup_procs: tuple[Path, ...] = field(default=())
    """Its ``cgroup.procs`` files: v1 one per hierarchy of memory, pids, cpu; v2 the one
    unified directory's; () when not running or not found."""


@dataclass(frozen=True)
class ContainerInfo:
    """A container as the API reports it (``GET /containers/{id}/json``)."""

    id: str
    name: str
    labels: dict[str, str]
    status: str
    """``running``, ``exited``, ``created``, ``paused``, ... (the API's State.Status)."""
    pid: int | None
    """Host pid of its init while running, else None."""
    exit_code: int | None
    """Its exit status once ended (128 + N: killed by signal N), else None."""
    oom_killed: bool
    started_at: datetime | None
    image: str = ""


def container_name(prefix: str, fleet: str, run_id: str) -> str:
    """``PREFIX-FLEET-RUNID``, characters a container name cannot hold made ``-``."""
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", f"{prefix}-{fleet}-{run_id}")


def argv_digest(argv: list[str]) -> str:
    """The ``argv-digest`` label: 16 hex digits of the SHA-256 of the argv as JSON."""
    return hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:16]


def cgroup_members(handle: ContainerHandle) -> list[int]:
    """Live pids of the container's cgroup(s), zombies left out, sorted.

    Read from ``handle.cgroup_procs`` (no API call); [] once the cgroup directories are
    gone (the container ended). A handle without cgroup files falls back to its init pid
    while that process still belongs to the container (its ``/proc/PID/cgroup`` names
    the container's id).
    """
    if handle.cgroup_procs:
        return live_pids(read_procs(handle.cgroup_procs))
    return live_pids([handle.pid]) if handle.pid is not None and _still_member(handle) else []


def kill_members(handle: ContainerHandle) -> list[int]:
    """SIGKILL every process of the container from the host; returns the pids signalled.

    The init (``handle.pid``) first: when a PID namespace's init dies the kernel kills
    every other member (pid_namespaces(7)); the rest are signalled too, so a member that
    the namespace's teardown has not reached yet does not hold memory longer. No API call
    (the memory-floor kill must not wait on the API's socket); the container itself stays
    until ``ContainerEngine.remove``.
    """
    if handle.cgroup_procs:
        return sigkill_pids(read_procs(handle.cgroup_procs), first=handle.pid)
    if _still_member(handle):
        assert handle.pid is not None
        return sigkill_pids([handle.pid])
    return []


def _still_member(handle: ContainerHandle) -> bool:
    if handle.pid is None:
        return False
    try:
        return handle.id in Path(f"/proc/{handle.pid}/cgroup").read_text()
    except OSError:
        return False


def _started(text: str | None) -> datetime | None:
    """``State.StartedAt`` (RFC 3339 with nanoseconds) as a UTC datetime; None for the
    zero time (never started) or an unreadable value."""
    if not text or text.startswith("0001-"):
        return None
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?", text)
    if m is None:
        return None
    frac = (m.group(2) or "")[:7]
    zone = m.group(3) if m.group(3) not in (None, "Z") else "+00:00"
    try:
        return datetime.fromisoformat(m.group(1) + frac + zone).astimezone(UTC)
    except ValueError:
        return None


def info_from(data: dict[str, Any]) -> ContainerInfo:
    """A ``ContainerInfo`` from an inspect reply (pure)."""
    state = data.get("State") or {}
    status = str(state.get("Status") or "unknown")
    pid = state.get("Pid") or None
    return ContainerInfo(
        id=data["Id"], name=str(data.get("Name") or "").lstrip("/"),
        labels=dict((data.get("Config") or {}).get("Labels") or {}), status=status,
        pid=pid if status == "running" else None,
        exit_code=state.get("ExitCode") if status in _ENDED else None,
        oom_killed=bool(state.get("OOMKilled")), started_at=_started(state.get("StartedAt")),
        image=str((data.get("Config") or {}).get("Image") or data.get("ImageName") or ""))

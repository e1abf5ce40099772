"""Finding an engine the supervisor did not start (``engine.adopt``, issue 31), and the
runtime that watches and stops a found process.

``find_process`` answers one search by the policy's selector: a ``Found`` (the API
server's pid and command line) or an ``Absent`` saying why not (nothing matches, the pid
file names no live process, or several processes match: their pids listed, so the
operator can write a narrower selector). ``find_container`` does the same through the
container engine's API (podman serves the Docker Engine API). ``AdoptedProcessRuntime``
is the ``EngineRuntime`` of a found process: its members are the process and its
descendants (not a process group: the engine was started by someone else, in a group of
their choosing), its exit seen through a pidfd, SIGTERM to it and SIGKILL to every member.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from agent_supervisor.act.container import ContainerEngine, ContainerInfo
from agent_supervisor.act.engine_run import EngineRun
from agent_supervisor.act.engine_runtime import wait_pid_gone
from agent_supervisor.act.processes import Leftovers, read_leftovers
from agent_supervisor.errors import EngineStartError
from agent_supervisor.policy.adopt import AdoptSpec

__all__ = ["Absent", "AdoptedProcessRuntime", "Found", "find_container", "find_process",
           "tree_members"]


@dataclass(frozen=True)
class Found:
    """An engine found: its API server's host ``pid`` and command line; a container's id
    and name too; ``started_at_s`` its start (Unix seconds)."""

    pid: int
    cmdline: tuple[str, ...]
    started_at_s: float
    container_id: str | None = None
    container_name: str | None = None


@dataclass(frozen=True)
class Absent:
    """No single engine found: ``reason`` in words; ``candidates`` the pids (or container
    names) when more than one matched (an ambiguous selector, an error to fix)."""

    reason: str
    candidates: tuple[str, ...] = ()


def _alive(pid: int) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _found(proc: psutil.Process) -> Found | Absent:
    try:
        return Found(proc.pid, tuple(proc.cmdline()), proc.create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied) as exc:
        return Absent(f"pid {proc.pid} could not be read: {exc}")


def _roots(pids: set[int]) -> list[int]:
    """Those of ``pids`` none of whose ancestors is in ``pids`` (an engine's own children
    matching the same selector are the engine, not a second one), sorted."""
    out = []
    for pid in sorted(pids):
        try:
            parents = {p.pid for p in psutil.Process(pid).parents()}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            parents = set()
        if not parents & pids:
            out.append(pid)
    return out


def _one(pids: set[int], what: str) -> Found | Absent:
    roots = _roots(pids)
    if not roots:
        return Absent(f"no live process {what}")
    if len(roots) > 1:
        return Absent(f"{len(roots)} processes {what} (pids {', '.join(map(str, roots))}): "
                      "narrow the selector to one", tuple(str(p) for p in roots))
    proc = _alive(roots[0])
    return Absent(f"pid {roots[0]} {what} is gone") if proc is None else _found(proc)


def find_process(spec: AdoptSpec, base_dir: Path, own_pid: int | None = None) -> Found | Absent:
    """One search for the process ``spec`` selects (``pid_file``, ``cmdline`` or ``port``).

    ``base_dir``: what a relative ``pid_file`` is relative to; ``own_pid`` (default this
    process) never matches. Blocks for one walk of /proc (``cmdline``) or of the socket
    table (``port``: ``psutil.net_connections``; a listener of another user shows no pid
    unless the supervisor is root: said so in the Absent). Never raises.
    """
    own = os.getpid() if own_pid is None else own_pid
    if spec.pid_file is not None:
        path = Path(spec.pid_file)
        path = path if path.is_absolute() else base_dir / path
        try:
            text = path.read_text().strip()
        except OSError as exc:
            return Absent(f"pid file {path}: {exc.strerror or exc}")
        if not text.isdigit():
            return Absent(f"pid file {path} holds {text[:40]!r}, not a pid")
        proc = _alive(int(text))
        return Absent(f"pid file {path} names pid {text}, which is not running") \
            if proc is None else _found(proc)
    if spec.cmdline is not None:
        pattern = re.compile(spec.cmdline)
        pids = set()
        for proc in psutil.process_iter(["pid", "cmdline"]):
            words = proc.info.get("cmdline") or []
            if proc.info["pid"] != own and words and pattern.search(" ".join(words)):
                pids.add(proc.info["pid"])
        return _one(pids, f"matching cmdline {spec.cmdline!r}")
    assert spec.port is not None
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError) as exc:
        return Absent(f"the socket table cannot be read: {exc}")
    listening = [c for c in conns if c.status == psutil.CONN_LISTEN and c.laddr
                 and c.laddr.port == spec.port]
    if listening and all(c.pid is None for c in listening):
        return Absent(f"port {spec.port} is listened on by a process this user cannot see "
                      "(run the supervisor as the engine's user or root)")
    return _one({c.pid for c in listening if c.pid is not None and c.pid != own},
                f"listening on port {spec.port}")


def find_container(spec: AdoptSpec, engine: ContainerEngine) -> tuple[Found | Absent,
                                                                      ContainerInfo | None]:
    """One search for the container ``spec`` selects (``container``: a name or id;
    ``container_label``: exactly one container carrying it). Blocks on the container
    engine's API. Returns the search's answer and the container as found (also when it
    is not running: a relaunch starts it again). Raises ContainerError when the API
    cannot be reached."""
    if spec.container is not None:
        info = engine.inspect(spec.container)
        if info is None:
            return Absent(f"no container named {spec.container!r}"), None
    else:
        assert spec.container_label is not None
        found = engine.labelled(spec.container_label)
        running = [c for c in found if c.status == "running"] or found
        if not running:
            return Absent(f"no container carries the label {spec.container_label!r}"), None
        if len(running) > 1:
            names = tuple(c.name for c in running)
            return Absent(f"{len(running)} containers carry the label "
                          f"{spec.container_label!r} ({', '.join(names)}): narrow it to one",
                          names), None
        info = running[0]
    if info.status != "running" or info.pid is None:
        return Absent(f"container {info.name} is {info.status}"), info
    proc = _alive(info.pid)
    if proc is None:
        return Absent(f"container {info.name}'s init pid {info.pid} is gone"), info
    found_ = _found(proc)
    if isinstance(found_, Found):
        found_ = Found(found_.pid, found_.cmdline, found_.started_at_s, info.id, info.name)
    return found_, info


def tree_members(pid: int | None) -> list[int]:
    """``pid`` and its live descendants (zombies left out), sorted; [] when it is gone."""
    if pid is None:
        return []
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    out = []
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
    return sorted(out)


class AdoptedProcessRuntime:
    """The ``EngineRuntime`` of an adopted process (not the supervisor's child).

    Members: the API server and its descendants, as last seen (a descendant that the
    kill orphans is remembered, so a second SIGKILL reaches it). The exit status of a
    process that is not our child is unknown (a pidfd says only that it ended)."""

    name = "adopted process"

    def __init__(self) -> None:
        self._seen: dict[str, set[int]] = {}

    async def spawn(self, run: EngineRun, policy: object) -> None:
        raise EngineStartError("an adopted engine is found, not spawned")

    async def wait_exit(self, run: EngineRun) -> str:
        gone = await wait_pid_gone(run.pid)
        return ("status unknown (adopted, not our child)" if gone else
                "status unknown (it was gone when adopted)")

    def members(self, run: EngineRun) -> list[int]:
        seen = self._seen.setdefault(run.run_id, set())
        now = tree_members(run.pid)
        seen.update(now)
        alive = {p for p in seen if _alive(p) is not None}
        self._seen[run.run_id] = alive
        return sorted(alive)

    def kill(self, run: EngineRun) -> None:
        for pid in self.members(run):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    async def terminate(self, run: EngineRun) -> None:
        if run.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(run.pid, signal.SIGTERM)

    async def finish(self, run: EngineRun) -> None:
        self._seen.pop(run.run_id, None)

    def leftovers(self, run: EngineRun) -> Leftovers:
        return read_leftovers(pids=self.members(run))

    def memory_bytes(self, run: EngineRun) -> int | None:
        return None

    async def adopt(self, run: EngineRun, argv: list[str]) -> bool:
        return False

    async def clear_leftover(self, run_id: str, pid: int, argv: list[str], timeout_s: float,
                             clock: Callable[[], float]) -> list[int]:
        return []

    async def orphans(self, keep_run_id: str | None) -> list[ContainerInfo]:
        return []


async def sleep_or(event: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``event`` is set, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)

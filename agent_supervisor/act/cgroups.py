"""A container's processes, read and killed from the host through its cgroup.

A container's processes live in their own PID namespace; from the host they are plain
processes (``/proc/<pid>/status`` ``NSpid`` maps host to container pids) and they are
exactly the members of the container's cgroup. With the cgroupfs manager (podman's
``cgroup_manager = "cgroupfs"``, Docker's ``cgroupfs`` driver) the directory is
``/sys/fs/cgroup/<controller>/libpod_parent/libpod-<id>`` (podman) or
``.../docker/<id>`` (Docker); with systemd it is ``.../system.slice/docker-<id>.scope``.
Rather than guessing the layout, the directories are read from the container init's
``/proc/<pid>/cgroup`` and the cgroup mounts in ``/proc/self/mountinfo``:

- cgroup v1 (also "hybrid": v1 controllers plus a v2 ``unified`` mount, as on these
  machines): one ``cgroup.procs`` per controller hierarchy among ``memory``, ``pids``,
  ``cpu`` (a combined ``cpu,cpuacct`` mount is one directory);
- cgroup v2: the one ``0::/PATH`` line under the ``cgroup2`` mount.

Sources: cgroups(7) (the ``/proc/<pid>/cgroup`` format; zombies and ``cgroup.procs``),
proc(5) (``mountinfo``), pid_namespaces(7) (the namespace's init dying takes every other
member with it).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from pathlib import Path

__all__ = ["CONTROLLERS", "MEMORY_FILES", "cgroup_dirs", "cgroup_mounts", "cgroup_procs_of",
           "live_pids", "memory_bytes", "read_procs", "sigkill_pids"]

#: The v1 controllers whose directories are watched: memory (what the floor is about),
#: pids and cpu (both always mounted where a container runtime runs).
CONTROLLERS = ("memory", "pids", "cpu")
_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(path: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), path)


def cgroup_mounts(mountinfo: str) -> dict[str, tuple[str, str]]:
    """The cgroup mounts of a ``/proc/<pid>/mountinfo`` text (pure).

    Returns: v1 controller name -> (root within the hierarchy, mount point), e.g.
    ``"memory": ("/", "/sys/fs/cgroup/memory")``, and ``""`` -> the same for the
    ``cgroup2`` mount (the unified hierarchy). The first mount of each wins.
    """
    out: dict[str, tuple[str, str]] = {}
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if tail[0] == "cgroup2":
            out.setdefault("", (root, point))
        elif tail[0] == "cgroup":
            for opt in tail[2].split(","):
                out.setdefault(opt, (root, point))
    return out


def _under(mount: tuple[str, str], path: str) -> Path | None:
    root, point = mount
    rel = os.path.relpath(path, root)
    return None if rel.startswith("..") else Path(os.path.normpath(os.path.join(point, rel)))


def cgroup_dirs(cgroup: str, mounts: dict[str, tuple[str, str]]) -> tuple[Path, ...]:
    """The cgroup directories of a process from its ``/proc/<pid>/cgroup`` text (pure).

    v1 lines (``4:memory:/libpod_parent/libpod-ID``) give one directory per hierarchy
    holding one of ``CONTROLLERS``, in that order, without repeats; when there are none
    (pure cgroup v2), the ``0::/PATH`` line gives the unified one. Returns () when no
    line maps onto a mount in ``mounts`` (``cgroup_mounts``).
    """
    v1: dict[str, str] = {}
    unified: str | None = None
    for line in cgroup.splitlines():
        hier, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if hier == "0" and ctrls == "":
            unified = path
        else:
            for c in ctrls.split(","):
                v1[c] = path
    dirs: list[Path] = []
    for c in CONTROLLERS:
        if c in v1 and c in mounts and (d := _under(mounts[c], v1[c])) is not None and \
                d not in dirs:
            dirs.append(d)
    if not dirs and unified is not None and "" in mounts and \
            (d := _under(mounts[""], unified)) is not None:
        dirs.append(d)
    return tuple(dirs)


def cgroup_procs_of(pid: int) -> tuple[Path, ...]:
    """The ``cgroup.procs`` files of process ``pid``'s cgroups (``cgroup_dirs``);
    () when the process is gone or its cgroups map onto no mount here."""
    try:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return ()
    return tuple(d / "cgroup.procs" for d in cgroup_dirs(cgroup, cgroup_mounts(mountinfo)))


def read_procs(procs: tuple[Path, ...]) -> list[int]:
    """Every pid listed in the ``cgroup.procs`` files, sorted, without repeats; a file
    that is gone (the container's cgroup removed) counts as empty."""
    pids: set[int] = set()
    for f in procs:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, NotADirectoryError):
            pids.update(int(p) for p in f.read_text().split())
    return sorted(pids)


def _state(pid: int) -> str | None:
    """The one-letter state from ``/proc/<pid>/stat`` (``Z`` zombie), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:][:1] or None


def live_pids(pids: list[int]) -> list[int]:
    """``pids`` without those gone or zombies."""
    return [p for p in pids if _state(p) not in (None, "Z")]


def sigkill_pids(pids: list[int], first: int | None = None) -> list[int]:
    """SIGKILL ``first`` (the PID namespace's init: its death ends the rest) and then
    every other pid of ``pids``; returns those signalled (gone ones left out)."""
    order = ([first] if first in pids else []) + [p for p in pids if p != first]
    sent = []
    for pid in order:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        sent.append(pid)
    return sent


#: The memory a cgroup charges, by cgroup version: v2 ``memory.current``, v1
#: ``memory.usage_in_bytes`` (the kernel's Documentation/admin-guide/cgroup-v2.rst and
#: cgroup-v1/memory.rst). Page cache included, as the OOM killer counts it.
MEMORY_FILES = ("memory.current", "memory.usage_in_bytes")


def memory_bytes(procs: tuple[Path, ...]) -> int | None:
    """The memory charged to the cgroup whose ``cgroup.procs`` files are ``procs`` (the
    first directory with a memory file), or None when none can be read."""
    for f in procs:
        for name in MEMORY_FILES:
            with contextlib.suppress(OSError, ValueError):
                return int((f.parent / name).read_text())
    return None

"""Evidence before the kill (issue 31): the stacks of a hung engine's processes, read
just before they are SIGKILLed.

A hung engine is killed with SIGKILL and leaves no trace of where it was stuck; vLLM
0.32 has no stack dump of its own (no ``faulthandler`` or watchdog in ``vllm/v1/engine/
core.py``; the watchdog that would write one is an open proposal: vllm RFC #56816, PR
#55700), and SGLang's soft watchdog is SGLang's. So the supervisor reads them from
outside: ``py-spy dump --pid N`` for a Python engine (vLLM: the API server, the
``VLLM::EngineCore``, its workers), ``eu-stack -p N`` or ``gdb -batch -p N -ex 'thread
apply all bt'`` for a native one (llama-server). Every member of the run (its process
group, or its container's cgroup) is read at once, each dump tool in its own session,
and every one still running at the deadline (``lifecycle.stack_dump_seconds``) is
killed with its group: the kill waits for the stacks at most that long, whatever the
tool does. A missing tool is skipped and said (``skipped``). Reading another process
needs ptrace rights over it: root, CAP_SYS_PTRACE, or an ancestor under Yama's
``ptrace_scope`` 1 (a pod that drops every capability cannot: rwlove/home-ops#13342).
A stopped process (SIGSTOP) cannot be read; it counts as a failed dump, not a delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psutil

__all__ = ["ProcessStack", "StackDump", "dump_stacks", "stack_tool"]

logger = logging.getLogger(__name__)

#: Characters of one process's dump kept with the incident: a vLLM EngineCore's main
#: thread is ~40 frames (~3 KB); its idle helper threads are cut first.
STACK_CHARS = 8000
#: Frames of each process in the one-line excerpt (the incident's explanation, the alert).
EXCERPT_FRAMES = 2
#: Searched after PATH: the interpreter's own bin directory, where the ``diagnostics``
#: extra installs py-spy (a systemd unit's PATH does not name the virtualenv).
EXTRA_TOOL_DIRS: tuple[str, ...] = (os.path.dirname(sys.executable),)
#: A py-spy frame line: four spaces, ``function (file:line)``.
_FRAME = re.compile(r"^\s{4}(\S.*?) \((\S+?:\d+)\)\s*$")


@dataclass(frozen=True)
class ProcessStack:
    """One process's dump: its stack text, or why there is none (``error``)."""

    pid: int
    title: str
    stack: str | None = None
    error: str | None = None

    def frames(self) -> list[str]:
        """The innermost frames of the first thread, ``function (file:line)``."""
        out: list[str] = []
        for line in (self.stack or "").splitlines():
            if line.startswith("Thread ") and out:
                break
            m = _FRAME.match(line)
            if m:
                out.append(f"{m.group(1)} ({m.group(2).rsplit('/', 1)[-1]})")
        return out


@dataclass(frozen=True)
class StackDump:
    """The stacks read before a kill: which tool, how long, one entry per process.

    ``skipped``: why nothing was read (no tool on PATH, the dump is off); None when the
    tool ran (each process then has its stack or its error).
    """

    tool: str | None
    seconds: float
    budget_seconds: float
    processes: tuple[ProcessStack, ...] = ()
    skipped: str | None = None
    reason: str = ""

    def to_evidence(self) -> dict[str, Any]:
        """JSON-ready, for the incident's evidence (``evidence["stacks"]``)."""
        return {"tool": self.tool, "seconds": round(self.seconds, 3),
                "budget_seconds": self.budget_seconds, "skipped": self.skipped,
                "reason": self.reason,
                "processes": [{"pid": p.pid, "title": p.title, "stack": p.stack,
                               "error": p.error} for p in self.processes]}

    def excerpt(self) -> str:
        """One line for the explanation and the alert: where each process was."""
        if self.skipped is not None:
            return f"no stacks before the kill ({self.skipped})"
        parts = []
        for p in self.processes:
            frames = p.frames()[:EXCERPT_FRAMES]
            where = " < ".join(frames) if frames else (p.error or "no frames")
            parts.append(f"{p.title or 'pid'} {p.pid}: {where}")
        return (f"stacks before the kill ({self.tool}, {self.seconds:.1f} s): "
                + "; ".join(parts))


def stack_tool(engine_kind: str, path: str | None = None) -> list[str] | None:
    """The dump command for one pid (``{pid}`` in it) of this kind of engine, or None
    when no tool for it is on ``path`` (default ``$PATH`` and ``EXTRA_TOOL_DIRS``)."""
    if path is None:
        path = os.pathsep.join([os.environ.get("PATH", os.defpath), *EXTRA_TOOL_DIRS])
    if engine_kind == "llama_cpp":
        if shutil.which("eu-stack", path=path):
            return [shutil.which("eu-stack", path=path) or "eu-stack", "-p", "{pid}"]
        gdb = shutil.which("gdb", path=path)
        return None if gdb is None else [gdb, "-batch", "-nx", "-p", "{pid}",
                                         "-ex", "thread apply all bt"]
    spy = shutil.which("py-spy", path=path)
    return None if spy is None else [spy, "dump", "--pid", "{pid}"]


async def dump_stacks(pids: Sequence[int], *, engine_kind: str, budget_seconds: float,
                      reason: str = "", path: str | None = None) -> StackDump:
    """Read the stacks of ``pids`` concurrently, all within ``budget_seconds``.

    Never raises and never blocks past the budget (plus the few milliseconds of killing
    the tools still running). Returns a StackDump with ``skipped`` set when the budget is
    0 or no tool is on ``path``.
    """
    t0 = time.monotonic()
    argv = stack_tool(engine_kind, path)
    if budget_seconds <= 0 or argv is None or not pids:
        why = ("lifecycle.stack_dump_seconds is 0" if budget_seconds <= 0 else
               "no engine process" if not pids else
               f"no {'eu-stack or gdb' if engine_kind == 'llama_cpp' else 'py-spy'} "
               "on PATH")
        logger.warning("engine stacks not read before the kill: %s", why)
        return StackDump(None, time.monotonic() - t0, budget_seconds, skipped=why,
                         reason=reason)
    deadline = t0 + budget_seconds
    found = await asyncio.gather(*(_one(argv, pid, deadline) for pid in pids))
    tool = os.path.basename(argv[0])
    dump = StackDump(tool, time.monotonic() - t0, budget_seconds, tuple(found),
                     reason=reason)
    logger.info("engine stacks read in %.2f s (budget %g s): %s", dump.seconds,
                budget_seconds, dump.excerpt())
    return dump


async def _one(argv: list[str], pid: int, deadline: float) -> ProcessStack:
    """Run the tool on ``pid`` until ``deadline``; its session is killed after that."""
    title = _title(pid)
    try:
        proc = await asyncio.create_subprocess_exec(
            *[a.replace("{pid}", str(pid)) for a in argv], stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
    except OSError as exc:
        return ProcessStack(pid, title, error=f"{argv[0]}: {exc}")
    try:
        out, err = await asyncio.wait_for(proc.communicate(),
                                          max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 1.0)
        return ProcessStack(pid, title, error="timed out (the dump tool was killed at "
                                              "the deadline)")
    text = out.decode(errors="replace")
    if proc.returncode != 0 or not text.strip():
        why = (err.decode(errors="replace").strip() or text.strip())[-300:]
        rc = proc.returncode or 0
        how = f"exit status {rc}" if rc >= 0 else f"killed by {_signal_name(-rc)}"
        return ProcessStack(pid, title, error=f"{how}: {why}" if why else how)
    return ProcessStack(pid, title, stack=text[:STACK_CHARS])


def _signal_name(number: int) -> str:
    """``SIGSYS`` for 31: a seccomp filter without ptrace (systemd's
    ``SystemCallFilter=~@debug``) kills the dump tool with it."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _title(pid: int) -> str:
    """The process's title (``VLLM::EngineCore``) or executable name; '' if gone."""
    try:
        argv = psutil.Process(pid).cmdline()
        first = argv[0].split()[0] if argv and argv[0].strip() else ""
        return os.path.basename(first) or psutil.Process(pid).name()
    except psutil.Error:
        return ""

"""The engine launcher: the only code that starts, signals or kills the engine.

Everyone else asks it for an ``EngineStatus`` (a snapshot) or calls ``start``, ``stop``
or ``kill``. States and edges are drawn in ``agent_supervisor.states``. Where the engine's
processes live (a child process group, or a container) is the runtime's business
(``act/engine_runtime.py``); the launcher's steps are the same for both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import subprocess
import time
from collections.abc import Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import httpx

from agent_supervisor.act.child_watch import START_FAILURE_LOG_SECONDS, ChildWatch, fatal_death
from agent_supervisor.act.container import ContainerInfo
from agent_supervisor.act.engine_env import find_run_tmp_dirs, remove_run_tmp_dirs
from agent_supervisor.act.engine_run import EngineRun, new_run_id, utcnow
from agent_supervisor.act.engine_runtime import EngineRuntime, ProcessRuntime, runtime_for
from agent_supervisor.act.processes import Leftovers, remove_stale_shm, shm_snapshot, spawn_failure
from agent_supervisor.act.stack_dump import StackDump, dump_stacks
from agent_supervisor.errors import EngineStartError, EngineStopTimeout, PolicyError
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.policy.engine_flags import flag_rules
from agent_supervisor.policy.model import ArgValue, Policy, build_argv
from agent_supervisor.privacy import mask_argv
from agent_supervisor.sense.host import mem_available, processes_rss_bytes
from agent_supervisor.sense.log_tail import LogTail
from agent_supervisor.sense.probes import probe_health
from agent_supervisor.states import CrashReason, EngineState, EngineStatus

__all__ = ["EngineLauncher"]

logger = logging.getLogger(__name__)

#: How often /health is polled while the engine starts; a 200 means the model is loaded
#: (vLLM binds its port only then; llama-server answers 503 "Loading model" until then).
READY_POLL_SECONDS = 0.25
#: How often a starting engine's tree is looked at for new ``VLLM::`` children to watch: a
#: child takes its title within milliseconds (setproctitle in vLLM's process entry) and its
#: death is seen through its pidfd at once; 0.1 s bounds the blind spot of a dying core.
START_WATCH_SECONDS = 0.1


class EngineLauncher:
    """Owns the engine process: spawn, readiness, exit watching, stop, kill, cleanup.

    ``on_change(run, state)`` is called (synchronously, on the event loop) after every
    state change; the service uses it to record runs and to decide at once on a crash.
    Not thread-safe: use from one asyncio loop.
    """

    def __init__(
        self,
        policy: Policy | PolicyHolder,
        *,
        on_change: Callable[[EngineRun, EngineState], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policy = PolicyHolder.of(policy)
        self._on_change = on_change
        self._clock = clock
        self._state = EngineState.STOPPED
        self._since_s = clock()
        self._run: EngineRun | None = None
        self._runtimes: dict[str, EngineRuntime] = {}
        self._rt: EngineRuntime = ProcessRuntime()   # the current run's (set at each start)
        self._exited = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._children = ChildWatch(self._child_exited)

    # -- read side -------------------------------------------------------------------

    @property
    def policy(self) -> Policy:
        """The policy in force (read on use: a reload swaps the holder's)."""
        return self._policy.current

    @property
    def state(self) -> EngineState:
        """The current state (see ``agent_supervisor.states``)."""
        return self._state

    @property
    def run(self) -> EngineRun | None:
        """The current or last run, or None before the first start."""
        return self._run

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the engine's HTTP server."""
        return f"http://{self.policy.engine.host}:{self.policy.engine.port}"

    def status(self) -> EngineStatus:
        """Snapshot of state and run for a Sample."""
        run = self._run
        if run is None:
            return EngineStatus(self._state, self._since_s)
        return EngineStatus(
            self._state, self._since_s, run.run_id, run.rung, run.pid, run.exit_code,
            run.exit_signal, None if run.crash_reason is None else str(run.crash_reason),
            was_ready=run.ready_s is not None, sigterm_ignored=run.sigterm_ignored,
            mem_available_before_bytes=run.mem_available_before_bytes,
            processes_rss_before_bytes=run.processes_rss_before_bytes,
            cgroup_memory_bytes=self._rt.memory_bytes(run))

    @property
    def runtime(self) -> EngineRuntime:
        """The runtime of the current run (``act/engine_runtime.py``)."""
        return self._rt

    def leftovers(self) -> Leftovers | None:
        """What is left of the current run's processes (its group, or its container's
        cgroup) once the launcher no longer runs it (CRASHED, STOPPED); None while it
        starts, serves or stops, or before any run."""
        run = self._run
        if run is None or run.pid is None or self._state not in (EngineState.CRASHED,
                                                                 EngineState.STOPPED):
            return None
        return self._rt.leftovers(run)

    # -- transitions -----------------------------------------------------------------

    def _set(self, state: EngineState, reason: str) -> None:
        run = self._run
        old = self._state
        self._state = state
        self._since_s = self._clock()
        rid = run.run_id if run else "-"
        logger.info("engine run %s: %s -> %s (%s)", rid, old, state, reason)
        if self._on_change is not None and run is not None:
            self._on_change(run, state)

    def _spawn_task(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self, *, rung: int, start_args: tuple[tuple[str, object], ...] = (),
                    run_id: str | None = None) -> EngineRun:
        """Launch the engine in mode ``policy.modes[rung]``; returns at once.

        1. Refuse if an engine of ours is still running (EngineStartError).
        2. Make the run's log file (under the state directory) and a private TMPDIR;
           read MemAvailable (a run field: the next start waits until it is back).
        3. Spawn the argument vector (no shell; ``start_args`` are a start-up fallback's
           flags over the mode's) through the policy's runtime: a new session, or a
           container; stdout and stderr to the log file; the engine survives the
           supervisor being killed.
        4. Watch for exit, watch every ``VLLM::`` child from the moment it appears (a core
           that dies while starting is seen at once: vLLM's API server keeps "Waiting for
           core engine" for a core that is gone, RBLN-SW/vllm-rbln#1000), and poll /health
           until ready. The launcher never times a start out: the start-up guard judges a
           start stuck only when it makes no progress.

        A spawn that fails (no such executable, port in use, an image the container
        engine lacks) does not raise: the run comes back CRASHED with ``crash_reason =
        spawn_failed`` and ``error`` set, and the decision logic treats it like any other
        failed start.
        """
        if self._state not in (EngineState.STOPPED, EngineState.CRASHED):
            raise EngineStartError(f"engine already {self._state}", engine_pid=self._pid())
        if self._state is EngineState.CRASHED:
            await self.kill(reason="clearing a crashed run before a new start")
        mode = self.policy.modes[rung]
        state_dir = self.policy.state_directory
        run_id = run_id or new_run_id()       # given: the id worker ranks were started for
        run = EngineRun(
            run_id=run_id, rung=rung, mode=mode.name,
            # A start-up fallback's flags are policy values (StartupFallback.args).
            argv=build_argv(self.policy, mode, cast("tuple[tuple[str, ArgValue], ...]",
                                                    start_args)),
            log_path=state_dir / "logs" / f"engine-{run_id}.log",
            tmp_dir=Path(),                       # made by spawn_engine (mkdtemp)
            started_s=self._clock(), started_at=utcnow(), shm_before=None,
            mem_available_before_bytes=mem_available(), start_args=tuple(start_args),
            processes_rss_before_bytes=processes_rss_bytes(),
        )
        run.log_tail = LogTail(run.log_path)
        self._run, self._exited = run, asyncio.Event()
        try:
            self._rt = runtime_for(self.policy, self._runtimes)
            run.shm_before = shm_snapshot()       # EMFILE here too under a flood
            await self._rt.spawn(run, self.policy)
        except (EngineStartError, OSError, subprocess.SubprocessError, PolicyError) as exc:
            run.error, run.crash_reason, run.ended_at = str(exc), spawn_failure(exc), utcnow()
            self._exited.set()
            self._set(EngineState.CRASHED, f"spawn failed: {exc}")
            return run
        where = f", container {run.container_name}" if run.container_name else ""
        logger.info("engine run %s: mode %s, pid %s%s, argv %s", run_id, mode.name, run.pid,
                    where, " ".join(mask_argv(run.argv)))
        self._set(EngineState.STARTING, f"spawned pid {run.pid}{where}")
        self._spawn_task(self._watch_exit(run))
        self._spawn_task(self._watch_ready(run))
        self._spawn_task(self._watch_start_children(run))
        return run

    async def _watch_exit(self, run: EngineRun) -> None:
        self._exited_now(run, await self._rt.wait_exit(run))

    def _exited_now(self, run: EngineRun, how: str) -> None:
        run.exited_s = self._clock()
        self._exited.set()
        self._unwatch_children()
        if self._run is not run or self._state not in (EngineState.STARTING, EngineState.READY):
            return  # a stop or kill we asked for, or a crash already declared
        was_ready = self._state is EngineState.READY
        run.crash_reason = CrashReason.EXITED if was_ready else CrashReason.START_FAILED
        run.ended_at = utcnow()
        self._set(EngineState.CRASHED, f"exited with {how} without being asked")

    async def _watch_ready(self, run: EngineRun) -> None:
        async with httpx.AsyncClient() as client:
            while self._run is run and self._state is EngineState.STARTING:
                status, _ = await probe_health(client, self.base_url, timeout_seconds=2.0)
                if self._run is not run or self._state is not EngineState.STARTING:
                    return
                if status == 200:
                    run.ready_s, run.ready_at = self._clock(), utcnow()
                    self._watch_children(run)
                    self._set(EngineState.READY, f"/health 200 after {run.startup_seconds:.1f} s")
                    return
                await asyncio.sleep(READY_POLL_SECONDS)

    async def _watch_start_children(self, run: EngineRun) -> None:
        """While the run starts, watch each ``VLLM::`` child (EngineCore, Worker) the moment
        it carries its title. Untitled children (compile jobs, the resource tracker) come
        and go during a start and are not watched."""
        while self._run is run and self._state is EngineState.STARTING:
            self._watch_children(run, titled_only=True)
            await asyncio.sleep(START_WATCH_SECONDS)

    def _watch_children(self, run: EngineRun, *, titled_only: bool = False) -> None:
        self._children.watch(run, run.pid, titled_only=titled_only)

    def _child_exited(self, run: EngineRun, pid: int, title: str = "") -> None:
        if self._run is not run or self._state not in (EngineState.READY, EngineState.STARTING):
            return
        if fatal_death(run.pid, title):
            what = f"{title} pid {pid} died" if title else f"engine child pid {pid} died"
            if self._state is EngineState.STARTING:
                self._spawn_task(self._start_failed(run, what))
                return
            run.crash_reason = CrashReason.ENGINE_CORE_DIED
            run.ended_at = utcnow()
            self._set(EngineState.CRASHED, f"{what}; the engine cannot go on")

    async def _start_failed(self, run: EngineRun, what: str) -> None:
        """A child died while starting: wait up to ``START_FAILURE_LOG_SECONDS`` for the API
        server's exit (its whole failure then logged), else crash on the death (issue 29)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._exited.wait(), START_FAILURE_LOG_SECONDS)
        if self._run is run and self._state is EngineState.STARTING:
            run.crash_reason = CrashReason.ENGINE_CORE_DIED
            run.ended_at = utcnow()
            self._set(EngineState.CRASHED, f"{what} during start-up; the API server still "
                      f"ran {START_FAILURE_LOG_SECONDS:g} s later")

    def _unwatch_children(self) -> None:
        self._children.clear()

    def _pid(self) -> int | None:
        return self._run.pid if self._run else None

    async def stop(self, *, reason: str = "stop requested") -> EngineRun | None:
        """Stop the engine on purpose and wait until its whole group is gone.

        1. SIGTERM to the API server; vLLM drains for up to ``--shutdown-timeout``.
        2. Wait ``stop_grace_seconds`` (+ vLLM's ``shutdown_timeout_seconds``) for it to exit.
        3. SIGKILL to every member: the whole process group, or every process of the
           container's cgroup (EngineCore and Workers can outlive the API server); if
           SIGTERM was ignored, their stacks are read first (``dump_stacks``).
        4. Wait up to ``kill_timeout_seconds`` for every member to vanish.
        5. Remove the container, the run's TMPDIR and the /dev/shm files it left behind.

        Blocks for at most the sum of those timeouts. A crashed engine is killed at once.
        Raises: EngineStopTimeout when a process of the group survives step 4.
        """
        run = self._run
        if run is None or self._state is EngineState.STOPPED:
            return run
        if self._state is EngineState.CRASHED or run.pid is None:
            return await self.kill(reason=reason)
        run.planned_stop = True
        self._set(EngineState.STOPPING, reason)
        if not self._exited.is_set():
            await self._rt.terminate(run)
            eng = self.policy.engine
            grace = flag_rules(eng.kind).stop_wait_seconds(eng)
            try:
                await asyncio.wait_for(self._exited.wait(), grace)
            except TimeoutError:
                run.sigterm_ignored = True
                logger.warning("engine run %s: still running %g s after SIGTERM (sigterm "
                               "ignored); SIGKILL to every member", run.run_id, grace)
                run.stacks = await self.dump_stacks("SIGTERM ignored")
        await self._reap_group(run)
        return run

    async def kill(self, *, reason: str, crash: CrashReason | None = None,
                   emergency: str | None = None) -> EngineRun | None:
        """SIGKILL the engine's whole process group now, wait for it to vanish, clean up.

        Used for an engine that already crashed (to clear what is left of it) and for
        emergencies. ``crash`` names the failure when the decision logic saw it before
        the launcher did (e.g. a dead EngineCore found by the tick while the API server
        still runs): the run is then recorded as that crash, not as a planned stop.
        ``emergency`` names why a healthy engine is killed on purpose (``memory_floor``).
        Blocks for at most ``kill_timeout_seconds``.
        Raises: EngineStopTimeout when a process of the group survives.
        """
        run = self._run
        if run is None or self._state is EngineState.STOPPED:
            return run
        if crash is not None and run.crash_reason is None:
            run.crash_reason = crash
        elif self._state is not EngineState.CRASHED:
            run.planned_stop, run.kill_reason = True, emergency
        self._set(EngineState.STOPPING, reason)
        await self._reap_group(run)
        return run

    async def dump_stacks(self, reason: str) -> StackDump | None:
        """The current run's stacks, read within ``lifecycle.stack_dump_seconds``."""
        run, eng = self._run, self.policy
        return None if run is None or run.pid is None else await dump_stacks(
            self._rt.members(run), engine_kind=eng.engine.kind,
            budget_seconds=eng.lifecycle.stack_dump_seconds, reason=reason)

    async def _reap_group(self, run: EngineRun) -> None:
        self._unwatch_children()
        timeout = self.policy.engine.kill_timeout_seconds
        if run.pid is not None:
            self._rt.kill(run)
            if not self._exited.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._exited.wait(), timeout)
            deadline = self._clock() + timeout
            survivors = self._rt.members(run)
            while survivors and self._clock() < deadline:
                await asyncio.sleep(0.05)
                self._rt.kill(run)
                survivors = self._rt.members(run)
            if survivors:
                # Recorded as stopped all the same: the ladder goes on (a new start then
                # meets the port still held, a failed spawn with backoff and give-up),
                # instead of waiting forever on processes SIGKILL cannot end (D state).
                run.ended_at = run.ended_at or utcnow()
                self._set(EngineState.STOPPED, f"pids {survivors} survived SIGKILL")
                raise EngineStopTimeout(
                    f"engine run {run.run_id}: pids {survivors} of {self._group(run)} "
                    f"survived SIGKILL for {timeout:g} s", engine_pid=run.pid,
                    survivors=survivors)
        run.ended_at = run.ended_at or utcnow()
        await self._rt.finish(run)
        self._cleanup(run)
        self._set(EngineState.STOPPED, "process group gone")

    @staticmethod
    def _group(run: EngineRun) -> str:
        return (f"container {run.container_name}" if run.container_name
                else f"group {run.pgid}")

    def _cleanup(self, run: EngineRun) -> None:
        if run.tmp_dir != Path():
            shutil.rmtree(run.tmp_dir, ignore_errors=True)
        removed = [] if run.shm_before is None else remove_stale_shm(run.shm_before)
        if removed:
            logger.info("engine run %s: removed %d leftover /dev/shm files: %s", run.run_id,
                        len(removed), ", ".join(removed))

    async def adopt(self, *, run_id: str, rung: int, pid: int, log_path: Path,
                    started_at: datetime) -> EngineRun | None:
        """Take over an engine an earlier life of the service launched and left running.

        Only if it still runs (its group, or its container found by the run id label) and
        its command line is exactly what this policy gives ``rung`` (same mode, same
        arguments); otherwise returns None and touches nothing (the caller stops it). The
        run keeps its id and log file (a container's log stream is followed again); its
        exit is watched through a pidfd (no longer our child: a process's exit status is
        unknown, a container's comes from the container engine); it is READY at once if
        /health answers 200, else STARTING.
        """
        if self._state is not EngineState.STOPPED:
            raise EngineStartError(f"engine already {self._state}", engine_pid=self._pid())
        argv = build_argv(self.policy, self.policy.modes[rung])
        age = max(0.0, (utcnow() - started_at).total_seconds())
        tmp_dirs = find_run_tmp_dirs(self.policy, run_id)
        run = EngineRun(run_id=run_id, rung=rung, mode=self.policy.modes[rung].name, argv=argv,
                        log_path=log_path, tmp_dir=tmp_dirs[0] if tmp_dirs else Path(),
                        started_s=self._clock() - age, started_at=started_at, pid=pid)
        rt = runtime_for(self.policy, self._runtimes)
        if not await rt.adopt(run, argv):
            return None
        run.log_tail = LogTail(log_path)
        logger.info("engine run %s: adopted pid %s (mode %s%s) from an earlier life", run_id,
                    run.pid, run.mode, f", container {run.container_name}"
                    if run.container_name else "")
        await self._watch_taken(run, rt)
        return run

    async def _watch_taken(self, run: EngineRun, rt: EngineRuntime) -> None:
        """Watch ``run``, an engine already running (``rt`` its runtime): its exit, then
        READY at once if /health answers 200, else STARTING until it does."""
        self._rt, self._run, self._exited = rt, run, asyncio.Event()
        self._spawn_task(self._watch_exit(run))
        async with httpx.AsyncClient() as client:
            status, _ = await probe_health(client, self.base_url, timeout_seconds=2.0)
        if status == 200:
            run.ready_s, run.ready_at = self._clock(), utcnow()
            self._watch_children(run)
            self._set(EngineState.READY, "adopted, /health 200")
        else:
            self._set(EngineState.STARTING, "adopted, not ready yet")
            self._spawn_task(self._watch_ready(run))

    async def clear_leftover(self, run_id: str, pid: int, argv: list[str]) -> list[int]:
        """Kill what is left of an engine an earlier life of the service launched.

        A process group ``pid`` is only touched if one of its live processes still looks
        like that engine (its command line is ``argv``, or it carries a ``VLLM::`` title),
        so a recycled pid is never killed: SIGTERM first, then SIGKILL after
        ``kill_timeout_seconds``. A container is found by its run id label, SIGKILLed
        through its cgroup and removed. The run's TMPDIR is removed either way.
        Returns: the pids that were found and killed.
        Raises: EngineStopTimeout when some survive.
        """
        remove_run_tmp_dirs(self.policy, run_id)
        rt = runtime_for(self.policy, self._runtimes)
        return await rt.clear_leftover(run_id, pid, argv,
                                       self.policy.engine.kill_timeout_seconds, self._clock)

    async def clear_orphans(self) -> list[ContainerInfo]:
        """Remove engine containers of this fleet and host that no run accounts for (a
        container of an earlier life whose run is closed or was never recorded), other
        than the current run's. Returns them as found ([] for the process runtime).
        Raises: EngineStopTimeout when a process of one survives SIGKILL."""
        rt = runtime_for(self.policy, self._runtimes)
        return await rt.orphans(self._run.run_id if self._run else None)

    async def close(self) -> None:
        """Cancel the watcher tasks (the engine itself is left as it is)."""
        self._unwatch_children()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


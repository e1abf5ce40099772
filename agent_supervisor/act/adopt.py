"""``AdoptingLauncher``: the launcher of a service that may watch an engine it did not
start (``engine.adopt``, issue 31 item 1).

Without ``engine.adopt`` it is the ``EngineLauncher``, unchanged. With it:

- A START looks for the engine (``act/adopt_find.py``) instead of launching one: found,
  it becomes the current run (READY at once if /health answers 200), recorded as an
  ``engine_adopted`` incident naming the selector and pid; not found, nothing starts and
  the service is *waiting for the engine to adopt* (``waiting``: the reason, in the
  status, the dashboard and the readiness answer), and the next START looks again. An
  ambiguous selector (several processes match) is an ``adopt_ambiguous`` incident listing
  their pids, once per set of candidates.
- While the run is gone by itself (crashed) and nothing will clear it (advise mode), or
  stopped, a watcher looks again every ``adopt.find_interval_seconds`` and takes a new pid
  (the engine restarted by its own manager) as a new run.
- It can stop what it adopted: an adopted process with stacks, SIGTERM and SIGKILL (to its
  process tree), an adopted container through its cgroup. It never stops it when the
  supervisor shuts down (``leave_running``).
- It relaunches an adopted container as itself (the container engine's ``start``). It
  never relaunches an adopted process unless ``adopt.take_over`` says the policy's command
  is the engine's own: then the first relaunch is a launch of the supervisor's own engine,
  recorded as ``adopted_engine_taken_over``, and from then on it is launched as usual.
  A stop without a relaunch is recorded as ``adopted_engine_stopped``.
- A decision that needs a relaunch in another mode (a step down or up, a planned restart,
  a reload) on an engine it cannot relaunch so is only advised, with the reason
  (``cannot_carry_out``: the executor's gate records it as ``would_<action>``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from agent_supervisor.act.adopt_find import (
    Absent,
    AdoptedProcessRuntime,
    Found,
    find_container,
    find_process,
    sleep_or,
)
from agent_supervisor.act.cgroups import memory_bytes
from agent_supervisor.act.container import (
    ContainerEngine,
    ContainerError,
    ContainerHandle,
    ContainerInfo,
    cgroup_members,
    kill_members,
)
from agent_supervisor.act.engine_run import EngineRun, new_run_id, utcnow
from agent_supervisor.act.engine_runtime import EngineRuntime, wait_pid_gone
from agent_supervisor.act.incident import Incident
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.act.processes import Leftovers, read_leftovers
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.policy.adopt import AdoptSpec
from agent_supervisor.policy.container import ContainerSpec
from agent_supervisor.sense.log_tail import LogTail
from agent_supervisor.states import CrashReason, EngineState

__all__ = ["AdoptedContainerRuntime", "AdoptingLauncher"]

logger = logging.getLogger(__name__)

#: Decisions that relaunch the engine in a mode the ladder picks: not possible on an
#: engine the supervisor cannot relaunch (an adopted process without ``take_over``).
MODE_CHANGES = (Action.STEP_DOWN, Action.STEP_UP, Action.PLANNED_RESTART, Action.RELOAD)


class AdoptSink(Protocol):
    """Where the launcher's adoption records go (the service's ``Recorder``)."""

    def incident(self, incident: Incident) -> None:
        """Record ``incident`` (record, metric, alert)."""

    def run_started(self, run: EngineRun, port: int) -> None:
        """An engine run began (here: was found)."""


class AdoptedContainerRuntime:
    """The ``EngineRuntime`` of an adopted container: watched and SIGKILLed from the host
    through its cgroup, SIGTERMed and waited on through the API; never removed."""

    name = "adopted container"

    def __init__(self, engine: ContainerEngine) -> None:
        self.engine = engine
        self.handles: dict[str, ContainerHandle] = {}

    async def spawn(self, run: EngineRun, policy: object) -> None:
        raise ContainerError("an adopted container is found, not created",
                             kind="runtime_refused")

    async def wait_exit(self, run: EngineRun) -> str:
        await wait_pid_gone(run.pid)
        if run.container_id is None:
            return "status unknown"
        try:
            code, oom = await asyncio.to_thread(self.engine.wait, run.container_id, 5.0)
        except ContainerError:
            code, oom = None, False
        run.oom_killed = oom
        return "status unknown" if code is None else f"container status {code}"

    def members(self, run: EngineRun) -> list[int]:
        handle = self.handles.get(run.run_id)
        return [] if handle is None else cgroup_members(handle)

    def kill(self, run: EngineRun) -> None:
        handle = self.handles.get(run.run_id)
        if handle is not None:
            kill_members(handle)

    async def terminate(self, run: EngineRun) -> None:
        if run.container_id is not None:
            with contextlib.suppress(ContainerError):
                await asyncio.to_thread(self.engine.signal, run.container_id, signal.SIGTERM)

    async def finish(self, run: EngineRun) -> None:
        self.handles.pop(run.run_id, None)

    def leftovers(self, run: EngineRun) -> Leftovers:
        return read_leftovers(pids=self.members(run))

    def memory_bytes(self, run: EngineRun) -> int | None:
        handle = self.handles.get(run.run_id)
        return None if handle is None else memory_bytes(handle.cgroup_procs)

    async def adopt(self, run: EngineRun, argv: list[str]) -> bool:
        return False

    async def clear_leftover(self, run_id: str, pid: int, argv: list[str], timeout_s: float,
                             clock: object) -> list[int]:
        return []

    async def orphans(self, keep_run_id: str | None) -> list[ContainerInfo]:
        return []


class AdoptingLauncher(EngineLauncher):
    """An ``EngineLauncher`` that adopts the engine ``engine.adopt`` selects (module doc).

    Set by the service after construction: ``sink`` (records), ``advising()`` (whether
    the service only advises: the watcher then takes a new pid over a crashed run, which
    nothing else will clear), ``poke()`` (decide at once after a find)."""

    sink: AdoptSink | None = None

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.advising: Callable[[], bool] = lambda: False
        self.poke: Callable[[], None] = lambda: None
        self.waiting: str | None = None
        """Why no engine was found at the last search (None: found, or not adopting)."""
        self.adopted = False
        """Whether the current run is an adopted engine (not launched by the supervisor)."""
        self.taken_over = False
        self._ambiguous: tuple[str, ...] = ()
        self._restart_due = False       # an adopted container stopped by the supervisor
        self._container: ContainerInfo | None = None
        self._engines: dict[str, ContainerEngine] = {}
        self._proc_rt = AdoptedProcessRuntime()
        self._find_lock = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    def attach(self, sink: AdoptSink, advising: Callable[[], bool],
               poke: Callable[[], None]) -> None:
        """The service's recorder, its advise-mode flag and its poke (see the class)."""
        self.sink, self.advising, self.poke = sink, advising, poke

    # -- what the rest of the service asks ---------------------------------------------

    @property
    def starting_reason(self) -> str:
        """Why the gateway holds before the first engine serves (its readiness reason)."""
        spec = self.adopt_spec
        return "engine starting" if spec is None else \
            f"waiting for the engine to adopt ({spec.selector})"

    @property
    def adopt_spec(self) -> AdoptSpec | None:
        """The policy's ``engine.adopt`` while it applies (None after a take-over). (Not
        ``adopt``: that is ``EngineLauncher.adopt``, an earlier life's run taken back.)"""
        spec = self.policy.engine.adopt
        return None if spec is None or self.taken_over else spec

    def leave_running(self) -> bool:
        """Whether a shutdown must leave the engine running: it is an adopted one."""
        return self.adopted and self.adopt_spec is not None

    def adoption(self) -> dict[str, object] | None:
        """The status view's ``adopt`` part; None without ``engine.adopt``."""
        spec = self.policy.engine.adopt
        if spec is None:
            return None
        run = self.run
        return {"selector": spec.selector, "waiting": self.waiting,
                "state": "waiting for the engine to adopt" if self.waiting else (
                    "taken over" if self.taken_over else "adopted" if self.adopted else
                    "not found yet"),
                "pid": run.pid if run is not None and self.adopted else None,
                "take_over": spec.take_over, "taken_over": self.taken_over,
                "log": spec.log_file or ("the container's log" if spec.is_container
                                         else None)}

    def cannot_carry_out(self, decision: Decision) -> str | None:
        """Why ``decision`` cannot be carried out on the adopted engine (None: it can).

        A mode change (step down or up, planned restart, reload) needs a relaunch in a mode
        of the policy: an adopted process without ``take_over`` cannot have one, and an
        adopted container is restarted only as itself (the same rung's planned restart
        and an operator's restart it can do)."""
        spec = self.adopt_spec
        if spec is None or not self.adopted or decision.action not in MODE_CHANGES:
            return None
        if spec.is_container:
            same = decision.rung == (self.run.rung if self.run else decision.rung)
            if same and decision.action in (Action.PLANNED_RESTART, Action.RELOAD):
                return None
            return (f"the adopted container runs its own command; the supervisor restarts "
                    f"it only as itself, not in mode {self.policy.modes[decision.rung].name}")
        if spec.take_over:
            return None
        return ("the adopted engine (found by " + spec.selector + ") cannot be relaunched "
                "by the supervisor: engine.adopt.take_over is false")

    # -- start: find, or take over -----------------------------------------------------

    async def start(self, *, rung: int, start_args: tuple[tuple[str, object], ...] = (),
                    run_id: str | None = None) -> EngineRun:
        """Without ``engine.adopt`` (or after a take-over): ``EngineLauncher.start``. With
        it: a relaunch of an adopted process under ``take_over`` launches the policy's
        command (recorded); a relaunch of an adopted container starts it again; then, and
        otherwise, one search. Returns the run current before it (possibly None, the type
        notwithstanding): the executor records no run then; a run found was recorded by
        ``find_now`` itself, ahead of its ``engine_adopted`` incident."""
        spec = self.adopt_spec
        if spec is None:
            return await super().start(rung=rung, start_args=start_args, run_id=run_id)
        self._ensure_watcher()
        if spec.take_over and self.adopted and self.state is not EngineState.STARTING:
            return await self._take_over(rung, start_args, run_id)
        if spec.is_container and self.adopted and self._container is not None:
            await self._restart_container(self._container)
        before = self.run
        await self.find_now(rung)             # a run found is recorded there, before its
        return before  # type: ignore[return-value]   # incident; the executor adds none

    async def _take_over(self, rung: int, start_args: tuple[tuple[str, object], ...],
                         run_id: str | None) -> EngineRun:
        old = self.run
        self.taken_over, self.adopted, self.waiting = True, False, None
        run = await super().start(rung=rung, start_args=start_args, run_id=run_id)
        mode = self.policy.modes[rung].name
        self._record("adopted_engine_taken_over", "take_over",
                     f"the adopted engine (pid {old.pid if old else None}) is relaunched "
                     f"with the policy's command (engine.adopt.take_over): mode {mode}, pid "
                     f"{run.pid}; the supervisor launches and supervises it as its own from "
                     "now on", "launched the supervisor's own engine", run.run_id)
        return run

    async def _restart_container(self, info: ContainerInfo) -> None:
        """Start the adopted container again, once after a stop of the supervisor's and
        only if it is not running already (its own restart policy may have done it)."""
        engine = self._engine()
        if not self._restart_due:
            return
        self._restart_due = False
        try:
            now = await asyncio.to_thread(engine.inspect, info.id)
            if now is None or now.status == "running":
                return
            await asyncio.to_thread(engine.start, info.id)
        except ContainerError as exc:
            logger.warning("adopted container %s: start failed: %s", info.name, exc)
            return
        self._record("adopted_engine_restarted", "start",
                     f"the adopted container {info.name} was started again through the "
                     "container engine (as itself: its own command and settings)",
                     "container started", self.run.run_id if self.run else None)

    async def find_now(self, rung: int | None = None) -> EngineRun | None:
        """One search now; a found engine (not the current run's) becomes the current
        run, recorded. Returns it, or None (``waiting`` says why)."""
        spec = self.adopt_spec
        if spec is None:
            return None
        async with self._find_lock:
            if self.state in (EngineState.STARTING, EngineState.READY, EngineState.STOPPING):
                return None
            found = await self._search(spec)
            if isinstance(found, Absent):
                self._absent(found)
                return None
            old = self.run
            if old is not None and old.pid == found.pid and self.members_alive(old):
                return None
            return await self._take(spec, found, self.ladder_rung(rung))

    def ladder_rung(self, rung: int | None) -> int:
        """The rung an adopted engine counts as running: the START's, else the last run's
        (0 before any)."""
        if rung is not None:
            return rung
        return self.run.rung if self.run is not None else 0

    def members_alive(self, run: EngineRun) -> bool:
        """Whether any process of ``run`` still lives."""
        return bool(self.runtime.members(run))

    async def _search(self, spec: AdoptSpec) -> Found | Absent:
        if not spec.is_container:
            return await asyncio.to_thread(find_process, spec, self.policy.base_dir)
        try:
            found, info = await asyncio.to_thread(find_container, spec, self._engine())
        except ContainerError as exc:
            return Absent(f"the container engine at {spec.api_socket} cannot be reached: "
                          f"{exc}")
        self._container = info or self._container
        return found

    def _absent(self, absent: Absent) -> None:
        if self.waiting != absent.reason:
            logger.warning("waiting for the engine to adopt: %s", absent.reason)
        self.waiting = absent.reason
        if absent.candidates and absent.candidates != self._ambiguous:
            self._ambiguous = absent.candidates
            spec = self.policy.engine.adopt
            selector = spec.selector if spec is not None else "?"
            self._record("adopt_ambiguous", "none", f"engine.adopt ({selector}) matches "
                         f"more than one engine: {absent.reason}",
                         "waiting: nothing adopted", None, severity="warning",
                         evidence={"candidates": list(absent.candidates)})

    async def _take(self, spec: AdoptSpec, found: Found, rung: int) -> EngineRun:
        if self.state is EngineState.CRASHED and self.run is not None:
            self.run.ended_at = self.run.ended_at or utcnow()
        run_id = new_run_id()
        state_dir = self.policy.state_directory
        log_path = (self._path(spec.log_file) if spec.log_file else
                    state_dir / "logs" / f"engine-{run_id}.log")
        age = max(0.0, time.time() - found.started_at_s)
        run = EngineRun(run_id=run_id, rung=rung, mode=self.policy.modes[rung].name,
                        argv=list(found.cmdline), log_path=log_path, tmp_dir=Path(),
                        started_s=self._clock() - age,
                        started_at=datetime.fromtimestamp(found.started_at_s, UTC),
                        pid=found.pid, container_id=found.container_id,
                        container_name=found.container_name)
        rt: EngineRuntime = self._proc_rt
        if spec.is_container:
            rt = await self._container_runtime(run)
        if spec.log_file or spec.is_container:
            run.log_tail = LogTail(log_path)
            run.log_tail.poll()              # what it wrote before: not this run's news
        self.adopted, self.waiting, self._ambiguous = True, None, ()
        logger.info("engine run %s: adopted pid %s found by %s (%s)", run_id, found.pid,
                    spec.selector, found.container_name or " ".join(found.cmdline)[:200])
        if self.sink is not None:            # before READY's update of the run's row
            self.sink.run_started(run, self.policy.engine.port)
        await self._watch_taken(run, rt)
        log = spec.log_file or ("the container's log stream" if spec.is_container else
                                "none (no engine.adopt.log_file: the log guards see nothing)")
        where = f" (container {found.container_name})" if found.container_name else ""
        then = ("it is relaunched with the policy's command if it must be (take_over)"
                if spec.take_over else "the supervisor restarts it only as itself"
                if spec.is_container else
                "the supervisor can stop it but never relaunches it")
        self._record("engine_adopted", "adopt",
                     f"engine found by {spec.selector}: pid {found.pid}{where} adopted as "
                     f"mode {run.mode}; log: {log}; {then}", "supervising it", run_id,
                     evidence={"pid": found.pid, "cmdline": list(found.cmdline)[:40],
                               "container": found.container_name, "log": log})
        self.poke()
        return run

    async def _container_runtime(self, run: EngineRun) -> EngineRuntime:
        engine = self._engine()
        key = "container"
        rt = self._runtimes.get(key)
        if not isinstance(rt, AdoptedContainerRuntime):
            rt = AdoptedContainerRuntime(engine)
            self._runtimes[key] = rt
        assert run.container_id is not None
        handle = await asyncio.to_thread(engine.handle, run.container_id)
        if handle is not None:
            rt.handles[run.run_id] = handle
        with contextlib.suppress(ContainerError):
            await asyncio.to_thread(engine.follow_logs, run.container_id, run.log_path,
                                    since=time.time())
        return rt

    def _engine(self) -> ContainerEngine:
        spec = self.policy.engine.adopt
        assert spec is not None
        if spec.api_socket not in self._engines:
            # The spec's image is never used: an adopted container is found, not created.
            self._engines[spec.api_socket] = ContainerEngine(
                ContainerSpec(image="adopted", api_socket=spec.api_socket),
                fleet=self.policy.fleet, host=socket.gethostname(),
                working_directory=self.policy.working_directory)
        return self._engines[spec.api_socket]

    def _path(self, text: str) -> Path:
        p = Path(text)
        return p if p.is_absolute() else self.policy.base_dir / p

    # -- stops: recorded as such; none at shutdown -------------------------------------

    async def kill(self, *, reason: str, crash: CrashReason | None = None,
                   emergency: str | None = None) -> EngineRun | None:
        """``EngineLauncher.kill``; on an adopted engine, recorded as a stop without a
        relaunch (or with one: take_over, a container)."""
        was = self.run if self.adopted and self.adopt_spec is not None else None
        run = await super().kill(reason=reason, crash=crash, emergency=emergency)
        self._stopped(was, reason)
        return run

    async def stop(self, *, reason: str = "stop requested") -> EngineRun | None:
        """``EngineLauncher.stop``; on an adopted engine, recorded as for ``kill``."""
        was = self.run if self.adopted and self.adopt_spec is not None else None
        run = await super().stop(reason=reason)
        self._stopped(was, reason)
        return run

    def _stopped(self, run: EngineRun | None, reason: str) -> None:
        spec = self.adopt_spec
        if run is None or spec is None:
            return
        self._restart_due = spec.is_container
        then = ("it is relaunched with the policy's command at the next start (take_over)"
                if spec.take_over else "the container is started again as itself at the "
                "next start" if spec.is_container else "it is not relaunched by the "
                "supervisor (engine.adopt.take_over is false): waiting for it to come back, "
                f"found again by {spec.selector}")
        self._record("adopted_engine_stopped", "stop", f"the adopted engine (pid {run.pid}) "
                     f"was stopped ({reason}); {then}", "stopped", run.run_id,
                     severity="warning")

    async def clear_leftover(self, run_id: str, pid: int, argv: list[str]) -> list[int]:
        """``EngineLauncher.clear_leftover``, except that the engine to adopt is left
        alone (an earlier life's adopted run is still open on record)."""
        spec = self.adopt_spec
        if spec is not None:
            found = await self._search(spec)
            if isinstance(found, Found) and found.pid == pid:
                logger.info("engine run %s: pid %s is the engine to adopt; left running",
                            run_id, pid)
                return []
        return await super().clear_leftover(run_id, pid, argv)

    # -- the watcher -------------------------------------------------------------------

    def _ensure_watcher(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """Look again while the adopted engine is gone and nothing else will (advising,
        or stopped): a new pid is taken as a new run."""
        while not self._closing.is_set():
            spec = self.adopt_spec
            if spec is None:
                return
            await sleep_or(self._closing, spec.find_interval_seconds)
            gone = self.state is EngineState.STOPPED or (
                self.state is EngineState.CRASHED and self.advising())
            if gone and self.run is not None and not self._closing.is_set():
                try:
                    await self.find_now()
                except Exception:                   # the watcher must outlive one search
                    logger.exception("looking for the engine to adopt failed")

    async def close(self) -> None:
        """Stop the watcher, then ``EngineLauncher.close`` (the engine is left as it is)."""
        self._closing.set()
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        for engine in self._engines.values():
            engine.close()
        await super().close()

    def _record(self, kind: str, action: str, explanation: str, outcome: str,
                run_id: str | None, *, severity: str = "info",
                evidence: dict[str, object] | None = None) -> None:
        logger.info("%s: %s", kind, explanation)
        if self.sink is None:
            return
        run = self.run
        self.sink.incident(Incident(
            kind=kind, severity=severity, started_at=datetime.now(UTC), action=action,
            mode=run.mode if run else None, rung=run.rung if run else None, run_id=run_id,
            explanation=explanation, outcome=outcome,
            findings=[{"kind": kind, "evidence": evidence or {}}]))

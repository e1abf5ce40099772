"""The service: one ``Supervisor`` wiring sense -> decide -> act -> record -> show.

Every tick (APScheduler, ``sampling.tick_seconds``) and every engine event (exit, a
child's death, ready) it takes one Sample, appends it to the Window, calls the pure
``decide()`` and hands a non-HOLD Decision to the Executor (``runtime/tick.py``). Engine
events do not wait for the next tick: a crash is decided on within milliseconds of the
launcher seeing it. Each collaborator owns its state (``agent_supervisor/runtime/``); this
module builds them and runs one life: lock, start-up, listeners, jobs, shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from agent_supervisor.act.adopt import AdoptingLauncher
from agent_supervisor.act.effects import Executor
from agent_supervisor.act.systemd import Notifier
from agent_supervisor.decide.decision import Decision
from agent_supervisor.errors import EngineStopTimeout
from agent_supervisor.policy import Policy, PolicyHolder
from agent_supervisor.record.store import Store
from agent_supervisor.record.trace import TraceWriter
from agent_supervisor.record.writer import RecordWriter
from agent_supervisor.runtime.calibrated import Calibrated
from agent_supervisor.runtime.events import EngineEvents
from agent_supervisor.runtime.gateway_wiring import gateway_for
from agent_supervisor.runtime.good_runs import GoodRuns
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.lock import InstanceLock
from agent_supervisor.runtime.nodes import engine_handle
from agent_supervisor.runtime.recorder import Recorder
from agent_supervisor.runtime.reload import Reloader
from agent_supervisor.runtime.service_parts import Listeners, Scheduler
from agent_supervisor.runtime.startup import StartUp
from agent_supervisor.runtime.status import LastDecision, StatusView
from agent_supervisor.runtime.supervision import Supervision
from agent_supervisor.runtime.tick import Ticker
from agent_supervisor.runtime.upkeep import Upkeep
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.sense.gpu import GpuSensor
from agent_supervisor.sense.kernel_log import KernelLogFollower
from agent_supervisor.show.alerts import Alerter
from agent_supervisor.show.metrics import SupervisorMetrics, register_process_metrics
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.window import Window

__all__ = ["Supervisor"]

logger = logging.getLogger(__name__)


class Supervisor:
    """Runs one engine under one policy until asked to stop.

    ``await run()`` returns the process exit status: 0 after a clean stop, 1 when the
    last rung exhausted its start limit (GIVE_UP) or the engine outlived its stop, 2
    when a listener could not bind its port. Raises AlreadyRunning (before anything is
    recorded) when another supervisor holds this policy's state directory."""

    def __init__(self, policy: Policy, store: Store, *, trace_path: Path | None = None,
                 policy_path: Path | None = None, advise: bool | None = None) -> None:
        self.holder = PolicyHolder(policy, policy_path)
        self.registry = CollectorRegistry()
        self.writer = RecordWriter(store, spool_path=policy.state_directory / "spool.jsonl",
                                   max_spool_bytes=policy.storage.spool_max_bytes)
        self.notifier = Notifier()
        self.metrics = SupervisorMetrics(self.registry)
        self.alerter = Alerter(policy.alerts, policy.fleet, self.metrics.alerts,
                               url=policy.webhook_url)
        self.alerter.follow(self.holder)           # its alerts section, at each reload
        self.recorder = Recorder(self.writer, self.metrics, self.alerter)
        self.trace = TraceWriter(trace_path) if trace_path is not None else None
        self.ladder = Ladder(self.holder, self.trace)
        self.window = Window(policy.sampling.window_seconds)
        self.window.follow(self.holder)            # its age, at each reload
        self.events = EngineEvents(self.holder, self.recorder, self.notifier, spawn=self._spawn,
                                   poke=self._poke, base_url=lambda: self.launcher.base_url)
        self.events.ladder = self.ladder
        self.launcher = AdoptingLauncher(self.holder, on_change=self.events)
        # The one engine handle (the launcher, or every rank across boxes), built first.
        self.engine = engine_handle(self.holder, self.launcher, self.recorder, self.ladder)
        self.nodes = self.engine.nodes
        self.gateway = gateway_for(self)     # issue 31: its verdict, advice and failovers
        self.sensors = Sensors(self.holder, gpu=GpuSensor(index=policy.sampling.gpu_index),
                               kernel=KernelLogFollower() if policy.sampling.kernel_log
                               else None, gateway=self.gateway, nodes=self.engine.poller,
                               engine_log=lambda: getattr(self.launcher.run, "log_tail", None))
        self.supervision = Supervision(self.holder, self.ladder, self.recorder, advise, self._poke)
        self.launcher.attach(self.recorder, lambda: self.supervision.advising, self._poke)
        self.executor = self.events.executor = Executor(
            self.holder, self.engine.engine, self.recorder, poke_at=self._poke_at,
            give_up=self._give_up, kernel_lines=lambda: list(self.sensors.recent_kernel_lines),
            gateway=self.gateway, advising=lambda: self.supervision.advising)
        self.last = LastDecision()
        self.status_view = StatusView(self.holder, self.ladder, self.launcher, self.window,
                                      store, self.registry, self.last, self.gateway,
                                      poke=self._poke, supervision=self.supervision)
        self.registry.register(self.status_view.collector(lambda: self.writer.spooled))
        register_process_metrics(self.registry)
        self.calibrated = Calibrated()             # the baselines, loaded in run()
        self._stop = asyncio.Event()
        self.good_runs = GoodRuns(self.holder, self.window, self.writer, self.trace,
                                  learned=self.calibrated.learned)
        self.ticker = Ticker(self.holder, self.sensors, self.launcher, self.executor,
                             self.ladder, self.window, self.last, self.trace,
                             stopping=self._stop.is_set, baselines=self.calibrated.throughput,
                             acceptance=self.calibrated.acceptance, update=self.good_runs.update,
                             observe=self.good_runs.observe, store=store)
        self.startup = StartUp(self.holder, self.launcher, self.recorder, self.ladder)
        self.upkeep = Upkeep(self.holder, self.recorder, self.launcher, self.window,
                             self.ladder, lambda: self.startup.service_run_id)
        self.reloader = Reloader(self.holder, self.ladder, self.recorder, poke=self._poke)
        self.listeners = Listeners(self.holder, self.gateway, self.status_view)
        self.scheduler = Scheduler(self.holder)
        self.holder.on_swap(self._policy_swapped)
        self.lock = InstanceLock(policy.state_directory)
        self.exit_code = 0
        self._detach = False
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def policy(self) -> Policy:
        """The policy in force (the holder's)."""
        return self.holder.current

    async def run(self) -> int:
        """Take the lock, clear leftovers, tick, wait for ``request_stop``, stop cleanly."""
        self.lock.acquire()               # AlreadyRunning: nothing started, nothing written
        self.writer.start()
        await self.writer.flush()          # an earlier life's spooled records go first
        await self.startup.previous_life()
        await self.startup.learn_start_budgets()
        await self.startup.start_sensors(self.sensors)
        await self.calibrated.load(self.writer.store, self.policy)
        await self.startup.clear_leftovers()
        self.supervision.started()
        if self.trace is not None:       # after adoption and the host-reset check
            st = self.ladder.state
            self.trace.header(fleet=self.policy.fleet, t0_s=st.since_s, rung=st.rung,
                              baselines=self.calibrated.throughput(),
                              last_trouble_s=st.last_trouble_s,
                              acceptance=self.calibrated.acceptance())
        self.alerter.start()
        try:
            await self.listeners.start()
        except OSError as exc:           # ListenError: a clean stop, exit 2
            logger.error("%s: stopping", exc)
            self.exit_code = 2
            await self._shutdown()
            return self.exit_code
        self.scheduler.start(self._scheduled_tick, [*self.upkeep.jobs(), (
            self.reloader.watch, self.policy.recovery.watch_interval_seconds)])
        if self.gateway is not None and self.launcher.state is not EngineState.READY:
            await self.gateway.hold(self.launcher.starting_reason, drain=False)
        self._poke()
        try:
            await self._stop.wait()
        finally:
            await self.scheduler.stop()
            await self._shutdown()
        return self.exit_code

    async def tick(self, *, reason: str = "schedule") -> Decision | None:
        """One tick now (``Ticker.tick``)."""
        return await self.ticker.tick(reason=reason)

    async def reload(self, reason: str = "SIGHUP") -> bool:
        """Reload the policy file (``Reloader.reload``); returns whether it was taken."""
        return await self.reloader.reload(reason)

    def request_stop(self, reason: str = "stop requested", *, detach: bool = False) -> None:
        """Ask ``run()`` to stop the engine and return (safe from a signal handler);
        ``detach`` (an upgrade): leave the engine and the gateway process running for
        the next life to adopt."""
        self._detach = self._detach or detach
        if not self._stop.is_set():
            logger.info("supervisor stopping: %s", reason)
            self.notifier.stopping()
            self.notifier.status(f"stopping: {reason}")
            self._stop.set()

    async def _shutdown(self) -> None:
        """1. let the running action finish; 2. hold the gateway, stop the engine; 3. close
        the launcher, the listeners, the alerter, spawned tasks, the sensors; 4. write the
        last telemetry and the clean-stop marker; 5. close the writer, trace and lock."""
        async with self.ticker.quiet():
            if self.gateway is not None and not self._detach:
                await self.gateway.hold("supervisor shutting down")
            try:
                if not self._detach and not self.launcher.leave_running():
                    await self.engine.engine.stop(reason="supervisor shutting down")
            except EngineStopTimeout as exc:
                logger.error("%s", exc)
                self.exit_code = self.exit_code or 1
        await self.launcher.close()
        if self.nodes is not None:
            await self.nodes.close()
        await self.listeners.stop(leave_gateway=self._detach)
        await self.alerter.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.sensors.close()
        self.upkeep.flush_telemetry()
        self.startup.record_stop(self.exit_code)
        await self.writer.close()
        if self.trace is not None:
            self.trace.close()
        self.lock.release()

    async def _scheduled_tick(self) -> None:
        if self.launcher.state is EngineState.STARTING:   # a start with progress may run long
            self.notifier.extend_timeout(self.policy.engine.start_timeout_seconds + 30)
        await self.ticker.tick(reason="schedule")
        # From the main loop, after a tick ran: a stuck supervisor stops pinging and
        # systemd (WatchdogSec=) restarts it.
        self.notifier.watchdog()

    def _give_up(self) -> None:
        self.exit_code = 1
        self.request_stop("the last rung exhausted its start limit")

    def _policy_swapped(self, old: Policy, new: Policy) -> None:
        if self.gateway is not None:
            self.gateway.apply_policy(new, self.ladder.rung)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _poke(self) -> None:
        self._poke_at(0)

    def _poke_at(self, delay_s: float) -> None:
        """Decide again after ``delay_s`` seconds (0: as soon as the loop is free)."""
        loop = asyncio.get_running_loop()
        loop.call_later(max(0.0, delay_s), lambda: self._spawn(self.ticker.tick(reason="event")))


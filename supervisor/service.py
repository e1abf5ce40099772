"""The service: one ``Supervisor`` wiring sense -> decide -> act -> record.

Every tick (APScheduler, ``sampling.tick_seconds``) and every engine event (exit, a
child's death, ready) it takes one Sample, appends it to the Window, calls the pure
``decide()`` and hands a non-HOLD Decision to the Executor. Engine events do not wait
for the next tick: a crash is decided on within milliseconds of the launcher seeing it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from prometheus_client import CollectorRegistry

from supervisor import __version__
from supervisor.act.effects import Executor, GatewayControl
from supervisor.act.incident import Incident
from supervisor.act.launcher import EngineLauncher, EngineRun
from supervisor.act.logfiles import rotate_engine_logs
from supervisor.act.systemd import Notifier
from supervisor.decide.decide import decide
from supervisor.decide.decision import Action, Decision
from supervisor.decide.ladder import (
    LadderState,
    advance,
    pause,
    pin,
    request,
    resume,
    unpin,
)
from supervisor.errors import EngineStopTimeout, PolicyError, StoreError
from supervisor.gateway.server import Gateway
from supervisor.policy import Policy, build_argv, load_policy_file
from supervisor.record.baselines import load_baselines
from supervisor.record.records import (
    AddIncident,
    AddTelemetry,
    ServiceHeartbeat,
    StartService,
    StopService,
    TelemetryPoint,
    UpdateRun,
    new_key,
)
from supervisor.record.retention import run_retention
from supervisor.record.store import Store
from supervisor.record.telemetry import telemetry_point
from supervisor.record.trace import TraceWriter
from supervisor.record.unclean import check_previous_life, read_boot_id
from supervisor.record.writer import RecordWriter
from supervisor.sense.collect import Sensors
from supervisor.sense.gateway_load import GatewayLoadSource
from supervisor.sense.gpu import GpuSensor
from supervisor.sense.kernel_log import KernelLogFollower
from supervisor.sense.probes import engine_version
from supervisor.serve import AppServer
from supervisor.show.alerts import Alerter
from supervisor.show.api.app import create_admin_app, load_token
from supervisor.show.metrics import StateCollector, StateView, SupervisorMetrics
from supervisor.states import EngineState
from supervisor.telemetry.baselines import Baselines
from supervisor.telemetry.rates import EngineRates, engine_rates
from supervisor.telemetry.sample import Sample
from supervisor.telemetry.window import Window

__all__ = ["Supervisor"]

logger = logging.getLogger(__name__)

#: How often spooled writes are retried, telemetry rows are cut (10 s resolution) and
#: written (in batches of 6, one a minute).
SPOOL_REPLAY_SECONDS = 30.0
TELEMETRY_SECONDS = 10.0
TELEMETRY_BATCH = 6
LOG_ROTATE_SECONDS = 60.0


def _mtime(path: Path | None) -> float | None:
    try:
        return None if path is None else path.stat().st_mtime
    except OSError:
        return None


def _fixed_sections(old: Policy, new: Policy) -> list[str]:
    """Settings a running service cannot change (listeners, storage)."""
    fixed = []
    if (old.engine.host, old.engine.port) != (new.engine.host, new.engine.port):
        fixed.append("engine.host/port")
    for name in ("gateway", "admin"):
        a, b = getattr(old, name), getattr(new, name)
        if (a.enabled, a.host, a.port) != (b.enabled, b.host, b.port):
            fixed.append(f"{name}.enabled/host/port")
    if old.storage != new.storage or old.state_directory != new.state_directory:
        fixed.append("storage")
    if old.fleet != new.fleet:
        fixed.append("fleet")
    return fixed


class Supervisor:
    """Runs one engine under one policy until asked to stop.

    ``await run()`` returns the process exit status: 0 after a clean stop, 1 when the
    last rung exhausted its start limit (GIVE_UP).
    """

    def __init__(self, policy: Policy, store: Store, *,
                 gateway: GatewayLoadSource | None = None,
                 gateway_control: GatewayControl | None = None,
                 trace_path: Path | None = None, policy_path: Path | None = None) -> None:
        self.policy = policy
        self.registry = CollectorRegistry()
        self.policy_path = policy_path
        self.writer = RecordWriter(store, spool_path=policy.state_directory / "spool.jsonl",
                                   max_spool_bytes=policy.storage.spool_max_bytes)
        self.launcher = EngineLauncher(policy, on_change=self._on_engine_change)
        self.gateway: Gateway | None = None
        if policy.gateway.enabled and gateway is None and gateway_control is None:
            self.gateway = Gateway(policy, rung=policy.initial_rung, registry=self.registry)
            gateway = gateway_control = self.gateway
        self.sensors = Sensors(
            policy, gpu=GpuSensor(index=policy.sampling.gpu_index),
            kernel=KernelLogFollower() if policy.sampling.kernel_log else None,
            gateway=gateway)
        self.metrics = SupervisorMetrics(self.registry)
        self.alerter = Alerter(policy.alerts, policy.fleet, self.metrics.alerts)
        self.executor = Executor(policy, self.launcher, self.writer,
                                 poke_at=self._poke_at, give_up=self._give_up,
                                 kernel_lines=lambda: list(self.sensors.recent_kernel_lines),
                                 gateway=gateway_control, metrics=self.metrics,
                                 alerter=self.alerter)
        self.registry.register(StateCollector(StateView(
            lambda: self.policy, latest=lambda: self.window.latest, rates=self._rates,
            rung=lambda: self.ladder.rung, spooled=lambda: self.writer.spooled)))
        self.started_s = time.monotonic()
        self._admin: AppServer | None = None
        self.notifier = Notifier()
        self._scheduler: AsyncIOScheduler | None = None
        self._policy_mtime = _mtime(policy_path)
        self.window = Window(policy.sampling.window_seconds)
        self.ladder = LadderState.initial(policy, time.monotonic())
        self.baselines: Baselines = {}
        self.trace = TraceWriter(trace_path) if trace_path is not None else None
        self._service_run_id: str | None = None
        self._telemetry_buffer: list[TelemetryPoint] = []
        self.last_decision: Decision | None = None
        self.last_decision_s: float | None = None
        self.exit_code = 0
        self._stop = asyncio.Event()
        self._tick_lock = asyncio.Lock()
        self._action: asyncio.Task[None] | None = None
        self._last_scheduled_s: float | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle -------------------------------------------------------------------

    async def run(self) -> int:
        """Clear leftovers, start ticking, wait for ``request_stop``, then stop cleanly."""
        self.writer.start()
        await self.writer.flush()          # an earlier life's spooled records go first
        await self._previous_life()
        await self.sensors.start()
        self.baselines = await asyncio.to_thread(load_baselines, self.writer.store, self.policy)
        if self.baselines:
            logger.info("calibrated baselines: %s", ", ".join(
                f"{m} {[f'{c:g}: {t:.0f} tok/s' for c, t in v]}"
                for m, v in self.baselines.items()))
        await self._clear_leftovers()
        if self.trace is not None:       # after adoption and the host-reset check
            self.trace.header(fleet=self.policy.fleet, t0_s=self.ladder.since_s,
                              baselines=self.baselines, rung=self.ladder.rung,
                              last_trouble_s=self.ladder.last_trouble_s)
        self.alerter.start()
        try:
            await self._start_listeners()
        except OSError as exc:
            logger.error("%s: stopping", exc)
            self.exit_code = 1
            await self._shutdown()
            return self.exit_code
        scheduler = self._scheduler = AsyncIOScheduler(event_loop=asyncio.get_running_loop())
        scheduler.add_job(self._scheduled_tick, "interval",
                          seconds=self.policy.sampling.tick_seconds, max_instances=1,
                          coalesce=True, misfire_grace_time=None, id="tick")
        st = self.policy.storage
        for job, seconds in ((self._replay_spool, SPOOL_REPLAY_SECONDS),
                             (self._heartbeat, st.heartbeat_seconds),
                             (self._telemetry, TELEMETRY_SECONDS),
                             (self._retention, st.retention_interval_seconds),
                             (self._rotate_logs, LOG_ROTATE_SECONDS),
                             (self._watch_policy, self.policy.recovery.watch_interval_seconds)):
            scheduler.add_job(job, "interval", seconds=seconds, max_instances=1,
                              coalesce=True, misfire_grace_time=None, id=job.__name__)
        scheduler.start()
        self._poke_at(0)
        try:
            await self._stop.wait()
        finally:
            scheduler.shutdown(wait=False)
            await self._shutdown()
        return self.exit_code

    async def _start_listeners(self) -> None:
        """The gateway and the admin API. Raises OSError when a port cannot be bound."""
        if self.gateway is not None:
            await self.gateway.start()
        if self.policy.admin.enabled:
            adm = self.policy.admin
            self._admin = AppServer(create_admin_app(self, token=load_token(self)), adm.host,
                                    adm.port, name="admin API")
            await self._admin.start()
            logger.info("admin API and dashboard at http://%s:%d/ (metrics: /metrics)",
                        adm.host, adm.port)

    def request_stop(self, reason: str = "stop requested") -> None:
        """Ask ``run()`` to stop the engine and return (safe from a signal handler)."""
        if not self._stop.is_set():
            logger.info("supervisor stopping: %s", reason)
            self.notifier.stopping()
            self.notifier.status(f"stopping: {reason}")
            self._stop.set()

    async def _shutdown(self) -> None:
        async with self._tick_lock:
            if self._action is not None:
                await asyncio.gather(self._action, return_exceptions=True)
            if self.gateway is not None:
                await self.gateway.hold("supervisor shutting down")
            try:
                await self.launcher.stop(reason="supervisor shutting down")
            except EngineStopTimeout as exc:
                logger.error("%s", exc)
                self.exit_code = self.exit_code or 1
        await self.launcher.close()
        if self.gateway is not None:
            await self.gateway.stop()
        if self._admin is not None:
            await self._admin.stop()
        await self.alerter.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.sensors.close()
        self._flush_telemetry()
        if self._service_run_id is not None:
            self.writer.submit(StopService(service_run_id=self._service_run_id,
                                           at=datetime.now(UTC), exit_code=self.exit_code))
        await self.writer.close()
        if self.trace is not None:
            self.trace.close()

    def _give_up(self) -> None:
        self.exit_code = 1
        self.request_stop("the last rung exhausted its start limit")

    async def _record_engine_version(self, run: EngineRun) -> None:
        """Ask the ready engine its vLLM version and keep it with the run."""
        async with httpx.AsyncClient() as client:
            version = await engine_version(client, self.launcher.base_url, 5.0)
        if version is not None:
            self.writer.submit(UpdateRun(run_id=run.run_id,
                                         values={"engine_version": version}))

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _poke_at(self, delay_s: float) -> None:
        """Decide again after ``delay_s`` seconds (0: as soon as the loop is free)."""
        loop = asyncio.get_running_loop()
        loop.call_later(max(0.0, delay_s), lambda: self._spawn(self.tick(reason="event")))

    async def _clear_leftovers(self) -> None:
        """Stop engines an earlier life of the service left running; close their runs."""
        store = self.writer.store
        rows = await asyncio.to_thread(store.unfinished_runs)
        if rows and self.policy.recovery.on_restart == "adopt":
            newest = rows[-1]
            if await self._adopt(newest):
                rows = rows[:-1]
        for row in rows:
            killed: list[int] = []
            if row.pid is not None:
                try:
                    killed = await self.launcher.clear_leftover(row.run_id, row.pid,
                                                                list(row.argv))
                except EngineStopTimeout as exc:
                    logger.error("%s", exc)
                    killed = exc.survivors
            outcome = "orphan_killed" if killed else "lost"
            now = datetime.now(UTC)
            self.writer.submit(UpdateRun(run_id=row.run_id,
                                         values={"ended_at": now, "outcome": outcome}))
            if killed:
                self.writer.submit(AddIncident(incident=Incident(
                    kind="orphaned_engine", severity="warning", started_at=now,
                    action="kill", mode=row.mode, rung=row.rung, run_id=row.run_id,
                    explanation=f"engine run {row.run_id} (mode {row.mode}) outlived an "
                    f"earlier life of the supervisor: killed pids {killed}",
                    outcome="process group gone",
                    findings=[{"pids": killed, "pgid": row.pid, "port": row.port}])))

    async def _adopt(self, row) -> bool:  # type: ignore[no-untyped-def]
        """Take over the engine the previous life left running, if it is still this
        policy's engine for its mode; returns whether it was adopted."""
        names = [m.name for m in self.policy.modes]
        if row.pid is None or row.mode not in names:
            return False
        rung = names.index(row.mode)
        run = await self.launcher.adopt(run_id=row.run_id, rung=rung, pid=row.pid,
                                        log_path=Path(row.log_path), started_at=row.started_at)
        if run is None:
            return False
        self.ladder = dataclasses.replace(self.ladder, rung=rung)
        self.writer.submit(AddIncident(incident=Incident(
            kind="engine_adopted", severity="info", started_at=datetime.now(UTC),
            action="adopt", mode=row.mode, rung=rung, run_id=row.run_id,
            explanation=f"engine run {row.run_id} (mode {row.mode}, pid {row.pid}) outlived "
            "an earlier life of the supervisor and was adopted without a restart",
            outcome="supervising it again", findings=[{"pid": row.pid, "port": row.port}])))
        return True

    # -- the tick --------------------------------------------------------------------

    async def _scheduled_tick(self) -> None:
        await self.tick(reason="schedule")
        # From the main loop, after a tick ran: a stuck supervisor stops pinging and
        # systemd (WatchdogSec=) restarts it.
        self.notifier.watchdog()

    async def tick(self, *, reason: str = "schedule") -> Decision | None:
        """Sample, decide, and hand the decision to the executor. Returns the decision,
        or None when a previous action is still being carried out (sampling continues)."""
        if self._stop.is_set():
            return None
        async with self._tick_lock:
            now = time.monotonic()
            lateness = None
            if reason == "schedule":
                if self._last_scheduled_s is not None:
                    late = now - self._last_scheduled_s - self.policy.sampling.tick_seconds
                    lateness = max(0.0, late)
                self._last_scheduled_s = now
            sample = await self._sample(now, lateness)
            self.window.append(sample)
            if self.trace is not None:
                self.trace.sample(sample)
            decision = decide(self.window, self.ladder, self.policy, now, self.baselines)
            if self._action is not None and not self._action.done():
                if decision.action is not Action.KILL_NOW:
                    if self.trace is not None:
                        self.trace.skip(now)
                    return None
                # An emergency does not wait for a drain or a graceful stop to finish:
                # seconds matter (a GB10 host can freeze ~5 s after memory runs out).
                logger.warning("emergency during %s: interrupting it", "an action")
                self._action.cancel()
                await asyncio.gather(self._action, return_exceptions=True)
            if self.trace is not None:
                self.trace.decision(now, decision)
            self.last_decision = decision
            self.last_decision_s = now
            from_rung = self.ladder.rung
            self.ladder = advance(self.ladder, decision, self.policy, now)
            self._action = asyncio.get_running_loop().create_task(
                self._carry_out(decision, from_rung))
            return decision

    async def _carry_out(self, decision: Decision, from_rung: int) -> None:
        try:
            await self.executor.carry_out(decision, from_rung=from_rung)
        except Exception:
            logger.exception("carrying out %s failed", decision.action)

    async def _sample(self, now: float, lateness: float | None) -> Sample:
        run = self.launcher.run
        # Keep the in-memory log tail current (bounded read) and classify the new lines.
        lines = run.log_tail.poll() if run is not None and run.log_tail is not None else []
        return await self.sensors.sample(now_s=now, status=self.launcher.status(),
                                         window=self.window, log_lines=lines,
                                         lateness_seconds=lateness)

    # -- records: previous life, heartbeat, telemetry, spool, retention --------------

    async def _previous_life(self) -> None:
        """Turn an earlier life without a clean stop into an incident; after a host
        reset, start where ``storage.after_host_reset`` says. Then record this life."""
        boot = read_boot_id()
        now = datetime.now(UTC)
        try:
            verdict = await asyncio.to_thread(
                check_previous_life, store=self.writer.store, boot_id=boot,
                modes=[m.name for m in self.policy.modes],
                after_host_reset=self.policy.storage.after_host_reset, now=now)
        except StoreError as exc:
            logger.error("cannot read the previous life of the service: %s", exc)
        else:
            if verdict.record is not None:
                logger.warning("%s", verdict.explanation)
                self.writer.submit(verdict.record)
            if verdict.start_rung is not None:
                self.ladder = dataclasses.replace(self.ladder, rung=verdict.start_rung,
                                                  last_trouble_s=time.monotonic())
        self._service_run_id = new_key()
        self.writer.submit(StartService(
            service_run_id=self._service_run_id, pid=os.getpid(), boot_id=boot, started_at=now,
            policy_path=str(self.policy_path) if self.policy_path else None,
            version=__version__))

    async def _heartbeat(self) -> None:
        if self._service_run_id is not None:
            self.writer.submit(ServiceHeartbeat(service_run_id=self._service_run_id,
                                                at=datetime.now(UTC)))

    async def _replay_spool(self) -> None:
        self.writer.replay_spool()

    async def _telemetry(self) -> None:
        latest = self.window.latest
        if latest is None:
            return
        run = self.launcher.run
        mode = run.mode if run is not None else self.policy.modes[self.ladder.rung].name
        point = telemetry_point(self.window, now_s=time.monotonic(), seconds=TELEMETRY_SECONDS,
                                mode=mode)
        if point is not None:
            self._telemetry_buffer.append(point)
        if len(self._telemetry_buffer) >= TELEMETRY_BATCH:
            self._flush_telemetry()

    def _flush_telemetry(self) -> None:
        if self._telemetry_buffer:
            self.writer.submit(AddTelemetry(points=tuple(self._telemetry_buffer)))
            self._telemetry_buffer.clear()

    async def _retention(self) -> None:
        st = self.policy.storage
        try:
            counts = await asyncio.to_thread(
                run_retention, store=self.writer.store, now=datetime.now(UTC),
                telemetry_retention_days=st.telemetry_retention_days,
                incident_retention_days=st.incident_retention_days,
                downsample_after_seconds=st.downsample_after_seconds)
        except StoreError as exc:
            logger.warning("retention skipped: %s", exc)
            return
        if any(counts.values()):
            logger.info("retention: %s", counts)

    def _rates(self) -> EngineRates | None:
        latest = self.window.latest
        return None if latest is None else engine_rates(self.window, 60.0, latest.t_s)

    # -- policy reload, log rotation ---------------------------------------------------

    async def reload(self, reason: str = "SIGHUP") -> bool:
        """Reload the policy file; returns whether the new policy was taken.

        The new file is validated first: a bad one is refused (an incident records why)
        and the running policy stays. Sections that cannot change while running (the
        engine's host and port, the gateway's and the admin API's listeners, storage)
        are refused too. Otherwise the new policy applies at once (gateway limits,
        guards, hysteresis), and when the running mode's engine arguments changed, the
        engine is drained and restarted through the normal switch (Action.RELOAD).
        """
        if self.policy_path is None:
            logger.warning("reload (%s) ignored: the policy did not come from a file", reason)
            return False
        self._policy_mtime = _mtime(self.policy_path)
        try:
            new = await asyncio.to_thread(load_policy_file, self.policy_path)
            fixed = _fixed_sections(self.policy, new)
            if fixed:
                raise PolicyError(str(self.policy_path), message="cannot change while running: "
                                  + ", ".join(fixed) + " (restart the service for that)")
        except PolicyError as exc:
            logger.error("policy reload (%s) refused, the running policy stays: %s", reason, exc)
            self.writer.submit(AddIncident(incident=Incident(
                kind="policy_rejected", severity="warning", started_at=datetime.now(UTC),
                action="keep_policy", mode=self.policy.modes[self.ladder.rung].name,
                rung=self.ladder.rung, explanation=f"policy reload ({reason}) refused: {exc}",
                outcome="the running policy stays", findings=[{"error": str(exc)}])))
            return False
        old, old_mode = self.policy, self.policy.modes[self.ladder.rung]
        names = [m.name for m in new.modes]
        rung = names.index(old_mode.name) if old_mode.name in names else new.initial_rung
        changed = (old_mode.name not in names
                   or build_argv(old, old_mode) != build_argv(new, new.modes[rung])
                   or old.engine.environment != new.engine.environment
                   or old.working_directory != new.working_directory)

        def remap(r: int | None) -> int | None:
            name = None if r is None else old.modes[r].name
            return names.index(name) if name in names else None

        self._apply_policy(new)
        self.ladder = dataclasses.replace(self.ladder, rung=rung, reload_pending=changed,
                                          pinned=remap(self.ladder.pinned),
                                          requested=remap(self.ladder.requested))
        if self.trace is not None:
            self.trace.operator(time.monotonic(), "reload", rung, reload_pending=changed)
        logger.info("policy reloaded (%s): %d modes; running mode %s%s", reason,
                    len(new.modes), new.modes[rung].name,
                    " changed: the engine restarts" if changed else " unchanged")
        self.writer.submit(AddIncident(incident=Incident(
            kind="policy_reloaded", severity="info", started_at=datetime.now(UTC),
            action="reload", mode=new.modes[rung].name, rung=rung,
            explanation=f"policy reloaded ({reason}); mode {new.modes[rung].name} "
            + ("arguments changed: drain and restart" if changed else "unchanged"),
            outcome="new policy in force")))
        self._poke_at(0)
        return True

    def _apply_policy(self, new: Policy) -> None:
        self.policy = new
        for part in (self.launcher, self.sensors, self.executor):
            part.policy = new
        self.window.max_age_seconds = new.sampling.window_seconds
        self.alerter.spec = new.alerts
        if self.gateway is not None:
            self.gateway.apply_policy(new, self.ladder.rung if self.ladder.rung < len(
                new.modes) else new.initial_rung)
        if self._scheduler is not None:
            self._scheduler.reschedule_job("tick", trigger="interval",
                                           seconds=new.sampling.tick_seconds)

    async def _watch_policy(self) -> None:
        if not self.policy.recovery.watch_policy_file or self.policy_path is None:
            return
        mtime = _mtime(self.policy_path)
        if mtime is not None and mtime != self._policy_mtime:
            await self.reload("policy file changed")

    async def _rotate_logs(self) -> None:
        run = self.launcher.run
        current = run.log_path if run is not None else None
        st = self.policy.storage
        await asyncio.to_thread(rotate_engine_logs, self.policy.state_directory / "logs",
                                current=current, max_bytes=st.engine_log_max_bytes,
                                keep=st.engine_logs_keep)

    # -- operator levers -------------------------------------------------------------

    def operate(self, action: str, mode: str | None = None) -> LadderState:
        """Pull an operator lever: ``pin`` (to ``mode``), ``unpin``, ``step-down``,
        ``step-up`` (one rung, once), ``pause``, ``resume``.

        Returns the new ladder state; the change is recorded in the trace and decided on
        at once. Raises KeyError for an unknown mode, ValueError for an unknown action.
        """
        now = time.monotonic()
        rung = None
        match action:
            case "pin":
                rung = self.policy.mode_index(mode or "")
                self.ladder = pin(self.ladder, rung)
            case "unpin":
                self.ladder = unpin(self.ladder)
            case "step-down" | "step-up":
                rung = self.ladder.rung + (1 if action == "step-down" else -1)
                if not 0 <= rung < len(self.policy.modes):
                    raise ValueError(f"no rung {action.split('-')[1]} of "
                                     f"{self.policy.modes[self.ladder.rung].name}")
                self.ladder = request(self.ladder, rung)
                action = "step"
            case "pause":
                self.ladder = pause(self.ladder)
            case "resume":
                self.ladder = resume(self.ladder)
            case _:
                raise ValueError(f"unknown operator action {action!r}")
        logger.info("operator: %s%s", action, f" {self.policy.modes[rung].name}"
                    if rung is not None else "")
        if self.trace is not None:
            self.trace.operator(now, action, rung)
        self._poke_at(0)
        return self.ladder

    # -- engine events ---------------------------------------------------------------

    def _on_engine_change(self, run: EngineRun, state: EngineState) -> None:
        status = f"mode {run.mode} (rung {run.rung}): engine {state}, run {run.run_id}"
        if state is EngineState.STARTING:
            self.notifier.extend_timeout(self.policy.engine.start_timeout_seconds + 30)
        if state is EngineState.READY:
            self.notifier.ready(status)
        self.notifier.status(status)
        if state is EngineState.READY:
            self.executor.engine_ready(run.rung)
            logger.info("engine ready: OpenAI API at %s/v1 (mode %s, run %s, %.1f s to ready)",
                        self.launcher.base_url, run.mode, run.run_id, run.startup_seconds or 0)
            self.writer.submit(UpdateRun(run_id=run.run_id, values={
                "ready_at": run.ready_at, "startup_seconds": run.startup_seconds}))
            self._spawn(self._record_engine_version(run))
        elif state is EngineState.CRASHED:
            self._poke_at(0)
        elif state is EngineState.STOPPED:
            outcome = str(run.crash_reason or run.kill_reason or "stopped")
            if run.error is not None or run.pid is not None:
                self.writer.submit(UpdateRun(run_id=run.run_id, values={
                    "ended_at": run.ended_at, "exit_code": run.exit_code,
                    "exit_signal": run.exit_signal, "planned_stop": run.planned_stop,
                    "outcome": outcome, "error": run.error}))

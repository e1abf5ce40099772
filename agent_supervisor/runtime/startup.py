"""``StartUp``: what this life of the service makes of the ones before it.

In order (``Supervisor.run``): 1. ``previous_life``: an earlier life without a clean
stop becomes an incident (``unclean_stop``, ``host_reset``); after a host reset with the
engine running, the first rung is ``decide/startup.py``'s choice; then this life's own
start is recorded. 2. ``clear_leftovers``: engine runs an earlier life left open are
adopted (``recovery.on_restart: adopt``, the newest, if it is still this policy's engine
for its mode) or killed and closed (``orphaned_engine``).

Every incident goes through the ``Recorder`` (record, metric, alert). Start-up
judgement that has to wait for the host (memory back before a start) belongs here too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_supervisor import __version__
from agent_supervisor.act.incident import Incident
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.errors import EngineStartError, EngineStopTimeout, StoreError
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.record.records import StartService, StopService, new_key
from agent_supervisor.record.unclean import check_previous_life, read_boot_id
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.sense.kernel_log import KernelLogFollower

__all__ = ["StartUp"]

logger = logging.getLogger(__name__)


class StartUp:
    """Start-up steps of one life. ``service_run_id``: this life's id, once recorded."""

    def __init__(self, policy: PolicyHolder, launcher: EngineLauncher, recorder: Recorder,
                 ladder: Ladder) -> None:
        self._policy = policy
        self.launcher = launcher
        self.recorder = recorder
        self.ladder = ladder
        self.service_run_id: str | None = None

    async def previous_life(self) -> None:
        """Turn an earlier life without a clean stop into an incident; after a host
        reset, start where ``storage.after_host_reset`` says. Then record this life.
        A store that cannot be read is logged; start-up goes on."""
        policy = self._policy.current
        boot = read_boot_id()
        now = datetime.now(UTC)
        try:
            verdict = await asyncio.to_thread(
                check_previous_life, store=self.recorder.writer.store, boot_id=boot,
                modes=[m.name for m in policy.modes],
                after_host_reset=policy.storage.after_host_reset, now=now)
        except StoreError as exc:
            logger.error("cannot read the previous life of the service: %s", exc)
        else:
            if verdict.record is not None:
                logger.warning("%s", verdict.explanation)
                self.recorder.incident_record(verdict.record)
            if verdict.start_rung is not None:
                self.ladder.start_on(verdict.start_rung, trouble_s=time.monotonic())
        self.service_run_id = new_key()
        self.recorder.write(StartService(
            service_run_id=self.service_run_id, pid=os.getpid(), boot_id=boot, started_at=now,
            policy_path=str(self._policy.path) if self._policy.path else None,
            version=__version__))

    async def learn_start_budgets(self) -> None:
        """The start budget of each mode from the record's past successful starts."""
        try:
            starts = await asyncio.to_thread(self.recorder.writer.store.start_durations)
        except StoreError as exc:
            logger.error("cannot read past starts (start budgets stay the policy's): %s", exc)
            return
        self.ladder.learn_starts(starts)

    def record_stop(self, exit_code: int) -> None:
        """This life stops cleanly with ``exit_code`` (the clean-stop marker)."""
        if self.service_run_id is not None:
            self.recorder.write(StopService(service_run_id=self.service_run_id,
                                            at=datetime.now(UTC), exit_code=exit_code))

    async def clear_leftovers(self) -> None:
        """Adopt or stop engines an earlier life of the service left running; close their
        runs."""
        rows = await asyncio.to_thread(self.recorder.writer.store.unfinished_runs)
        adopt = self._policy.current.recovery.on_restart == "adopt"
        if rows and adopt and await self._adopt(rows[-1]):
            rows = rows[:-1]
        for row in rows:
            await self._clear(row)
        await self._clear_orphan_containers()

    async def _clear_orphan_containers(self) -> None:
        """Engine containers of this fleet and host that no open run accounts for (the
        record lost, or closed while the container lived on): killed, removed, on record.
        A container engine that does not answer is logged; the start then meets it."""
        try:
            found = await self.launcher.clear_orphans()
        except (EngineStopTimeout, EngineStartError) as exc:
            logger.error("cannot clear engine containers of an earlier life: %s", exc)
            return
        for info in found:
            run_id = info.labels.get("io.agent-supervisor.run-id")
            self.recorder.incident(Incident(
                kind="orphaned_engine", severity="warning", started_at=datetime.now(UTC),
                action="kill", mode=info.labels.get("io.agent-supervisor.mode"),
                run_id=run_id, explanation=f"engine container {info.name} (run {run_id}, "
                f"{info.status}) outlived an earlier life of the supervisor: removed",
                outcome="container removed",
                findings=[{"container": info.name, "container_id": info.id[:12],
                           "status": info.status, "pid": info.pid}]))

    async def start_sensors(self, sensors: Sensors) -> None:
        """Start the sensors, then check that the kernel log can be read
        (``kernel_log_check``)."""
        await sensors.start()
        self.kernel_log_check(sensors.kernel)

    def kernel_log_check(self, follower: KernelLogFollower | None) -> None:
        """Record a ``kernel_log_unreadable`` warning incident (record, metric, alert) when
        the started kernel log follower cannot read the kernel log (its ``warning``, which
        names the fix: sense/kernel_log.py ``UNREADABLE_FIX``); nothing when it can or when
        ``sampling.kernel_log`` is off (``follower`` None)."""
        if follower is None or follower.warning is None:
            return
        self.recorder.incident(Incident(
            kind="kernel_log_unreadable", severity="warning", started_at=datetime.now(UTC),
            action="none", explanation=follower.warning,
            outcome="supervising without kernel lines", findings=[{
                "kind": "kernel_log_unreadable", "evidence": {"source": follower.source}}]))

    async def _clear(self, row: Any) -> None:
        killed: list[int] = []
        if row.pid is not None:
            try:
                killed = await self.launcher.clear_leftover(row.run_id, row.pid, list(row.argv))
            except EngineStopTimeout as exc:
                logger.error("%s", exc)
                killed = exc.survivors
        now = datetime.now(UTC)
        self.recorder.run_changed(row.run_id, {"ended_at": now, "outcome": "orphan_killed"
                                               if killed else "lost"})
        if killed:
            self.recorder.incident(Incident(
                kind="orphaned_engine", severity="warning", started_at=now,
                action="kill", mode=row.mode, rung=row.rung, run_id=row.run_id,
                explanation=f"engine run {row.run_id} (mode {row.mode}) outlived an "
                f"earlier life of the supervisor: killed pids {killed}",
                outcome="process group gone",
                findings=[{"pids": killed, "pgid": row.pid, "port": row.port}]))

    async def _adopt(self, row: Any) -> bool:
        """Take over the engine the previous life left running, if it is still this
        policy's engine for its mode; returns whether it was adopted."""
        names = [m.name for m in self._policy.current.modes]
        if row.pid is None or row.mode not in names:
            return False
        rung = names.index(row.mode)
        run = await self.launcher.adopt(run_id=row.run_id, rung=rung, pid=row.pid,
                                        log_path=Path(row.log_path), started_at=row.started_at)
        if run is None:
            return False
        self.ladder.start_on(rung)
        self.recorder.incident(Incident(
            kind="engine_adopted", severity="info", started_at=datetime.now(UTC),
            action="adopt", mode=row.mode, rung=rung, run_id=row.run_id,
            explanation=f"engine run {row.run_id} (mode {row.mode}, pid {row.pid}) outlived "
            "an earlier life of the supervisor and was adopted without a restart",
            outcome="supervising it again", findings=[{"pid": row.pid, "port": row.port}]))
        return True

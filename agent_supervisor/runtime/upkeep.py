"""``Upkeep``: the service's periodic jobs besides the tick: the heartbeat of this
life, spool replay, telemetry rows, retention and engine log rotation.

Each job is an ``async`` method with its interval in ``jobs()``; the service schedules
them. None raises: a store that is down is logged and tried at the next run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from agent_supervisor.act.incident import Incident
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.act.logfiles import rotate_engine_logs
from agent_supervisor.errors import StoreError
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.record.records import AddTelemetry, ServiceHeartbeat, TelemetryPoint
from agent_supervisor.record.retention import HOLD_FRACTION, HOLD_MIN_ROWS, run_retention
from agent_supervisor.record.telemetry import telemetry_point
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder
from agent_supervisor.telemetry.window import Window

__all__ = ["LOG_ROTATE_SECONDS", "SPOOL_REPLAY_SECONDS", "TELEMETRY_BATCH",
           "TELEMETRY_SECONDS", "Upkeep"]

logger = logging.getLogger(__name__)

#: How often spooled writes are retried, telemetry rows are cut (10 s resolution) and
#: written (in batches of 6, one a minute), and the engine's logs are rotated.
SPOOL_REPLAY_SECONDS = 30.0
TELEMETRY_SECONDS = 10.0
TELEMETRY_BATCH = 6
LOG_ROTATE_SECONDS = 60.0


class Upkeep:
    """The periodic jobs. ``service_run_id``: a callable giving this life's id (None
    until start-up recorded it)."""

    def __init__(self, policy: PolicyHolder, recorder: Recorder, launcher: EngineLauncher,
                 window: Window, ladder: Ladder,
                 service_run_id: Callable[[], str | None]) -> None:
        self._policy = policy
        self.recorder = recorder
        self.launcher = launcher
        self.window = window
        self.ladder = ladder
        self._service_run_id = service_run_id
        self._telemetry_buffer: list[TelemetryPoint] = []
        self._retention_held_recorded = False

    def jobs(self) -> list[tuple[Callable[[], Awaitable[None]], float]]:
        """(job, interval in seconds) for each job, as the policy sets them now."""
        st = self._policy.current.storage
        return [(self.replay_spool, SPOOL_REPLAY_SECONDS), (self.heartbeat, st.heartbeat_seconds),
                (self.telemetry, TELEMETRY_SECONDS),
                (self.retention, st.retention_interval_seconds),
                (self.rotate_logs, LOG_ROTATE_SECONDS)]

    async def heartbeat(self) -> None:
        """This life is still alive (an unclean stop is told by a stale heartbeat)."""
        run_id = self._service_run_id()
        if run_id is not None:
            rung = self.ladder.rung
            self.recorder.write(ServiceHeartbeat(
                service_run_id=run_id, at=datetime.now(UTC), rung=rung,
                mode=self._policy.current.modes[rung].name,
                engine_state=str(self.launcher.state)))

    async def replay_spool(self) -> None:
        """Retry the writes spooled while the database was down."""
        self.recorder.writer.replay_spool()

    async def telemetry(self) -> None:
        """Cut one 10-s telemetry row from the window; write them six at a time."""
        if self.window.latest is None:
            return
        run = self.launcher.run
        mode = run.mode if run is not None else \
            self._policy.current.modes[self.ladder.rung].name
        point = telemetry_point(self.window, now_s=time.monotonic(), seconds=TELEMETRY_SECONDS,
                                mode=mode)
        if point is not None:
            self._telemetry_buffer.append(point)
        if len(self._telemetry_buffer) >= TELEMETRY_BATCH:
            self.flush_telemetry()

    def flush_telemetry(self) -> None:
        """Write the rows cut so far (at shutdown, and every TELEMETRY_BATCH rows)."""
        if self._telemetry_buffer:
            self.recorder.write(AddTelemetry(points=tuple(self._telemetry_buffer)))
            self._telemetry_buffer.clear()

    async def retention(self) -> None:
        """Fold and delete old rows (``storage.*_retention_days``). A step held by
        retention's bound (most of a table at once: a clock jump, issue 34) is recorded
        as a ``retention_held`` incident, once per life; every held run logs a warning."""
        st = self._policy.current.storage
        try:
            counts = await asyncio.to_thread(
                run_retention, store=self.recorder.writer.store, now=datetime.now(UTC),
                telemetry_retention_days=st.telemetry_retention_days,
                incident_retention_days=st.incident_retention_days,
                downsample_after_seconds=st.downsample_after_seconds)
        except StoreError as exc:
            logger.warning("retention skipped: %s", exc)
            return
        if any(counts.values()):
            logger.info("retention: %s", counts)
        held = {k.removesuffix("_held"): v for k, v in counts.items() if k.endswith("_held")}
        if held and not self._retention_held_recorded:
            self._retention_held_recorded = True
            policy = self._policy.current
            rows = ", ".join(f"{n} {name}" for name, n in held.items())
            self.recorder.incident(Incident(
                kind="retention_held", severity="warning", started_at=datetime.now(UTC),
                action="keep_rows", mode=policy.modes[self.ladder.rung].name,
                rung=self.ladder.rung, outcome="rows kept",
                explanation=f"retention kept rows it would have deleted at once ({rows}): "
                            "most of a table looked old, as after a forward clock jump; "
                            "check the clock (timedatectl)",
                findings=[{"held_rows": held, "now": datetime.now(UTC).isoformat(),
                           "hold_fraction": HOLD_FRACTION, "hold_min_rows": HOLD_MIN_ROWS}]))

    async def rotate_logs(self) -> None:
        """Rotate the engine's log files (``storage.engine_log_max_bytes``, ``_keep``)."""
        run = self.launcher.run
        policy = self._policy.current
        st = policy.storage
        await asyncio.to_thread(rotate_engine_logs, policy.state_directory / "logs",
                                current=run.log_path if run is not None else None,
                                max_bytes=st.engine_log_max_bytes, keep=st.engine_logs_keep)

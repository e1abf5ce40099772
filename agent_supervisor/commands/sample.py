"""Sample an engine the supervisor is not running right now (``supervisor sample``).

Finds the engine by its policy: the newest run recorded in the store for this fleet and
host that never ended, if its process group lives; else whatever listens on the policy's
port. Its state is what can be seen from outside: ready (``/health`` 200), starting
(alive, no 200 yet) or stopped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

import httpx
import psutil

from agent_supervisor.act.processes import group_members
from agent_supervisor.policy import Policy
from agent_supervisor.record.store import Store
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.sense.gpu import GpuSensor
from agent_supervisor.sense.kernel_log import KernelLogFollower
from agent_supervisor.sense.probes import probe_health
from agent_supervisor.states import EngineState, EngineStatus
from agent_supervisor.telemetry.window import Window

__all__ = ["find_engine", "observe"]

logger = logging.getLogger(__name__)


def find_engine(policy: Policy) -> tuple[int | None, str | None, int | None]:
    """(API server pid, run id, rung) of the policy's engine, or Nones if none runs."""
    try:
        store = Store.open(policy.database_url, fleet=policy.fleet)
        try:
            rows = store.unfinished_runs()
        finally:
            store.close()
    except Exception as exc:  # noqa: BLE001 - no store is fine: fall back to the port
        logger.info("no usable store (%s): looking at port %d", exc, policy.engine.port)
        rows = []
    for row in reversed(rows):
        if row.pid is not None and group_members(row.pid):
            return row.pid, row.run_id, row.rung
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if (conn.status == psutil.CONN_LISTEN and conn.laddr
                    and conn.laddr.port == policy.engine.port and conn.pid):
                return conn.pid, None, None
    except psutil.AccessDenied:
        logger.warning("not allowed to list sockets: cannot find the engine by its port")
    return None, None, None


async def _status(policy: Policy, client: httpx.AsyncClient,
                  previous: EngineStatus | None) -> EngineStatus:
    pid, run_id, rung = find_engine(policy)
    now = time.monotonic()
    if pid is None or not psutil.pid_exists(pid):
        state = EngineState.STOPPED
    else:
        eng = policy.engine
        health, _ = await probe_health(client, f"http://{eng.host}:{eng.port}",
                                       policy.sampling.probe_timeout_seconds)
        state = EngineState.READY if health == 200 else EngineState.STARTING
    # The state's age carries over while nothing changed (guards read it in replay).
    same = previous is not None and (previous.state, previous.pid) == (state, pid)
    since = previous.since_s if same and previous is not None else now
    return EngineStatus(state, since, run_id=run_id, rung=rung, pid=pid)


async def observe(policy: Policy, *, watch: bool, interval_seconds: float,
                  emit: Callable[[str], None] = print, count: int | None = None) -> int:
    """Print one Sample as JSON, or with ``watch`` one JSON line per interval.

    ``count`` bounds the number of samples in watch mode (None: until cancelled).
    Returns: exit status 0.
    """
    sensors = Sensors(policy, gpu=GpuSensor(index=policy.sampling.gpu_index),
                      kernel=KernelLogFollower() if policy.sampling.kernel_log else None)
    await sensors.start()
    window = Window(policy.sampling.window_seconds)
    n = 0
    try:
        async with httpx.AsyncClient() as client:
            status: EngineStatus | None = None
            while True:
                status = await _status(policy, client, status)
                sample = await sensors.sample(now_s=time.monotonic(), status=status,
                                              window=window)
                window.append(sample)
                indent = None if watch else 2
                emit(json.dumps(sample.to_dict(), indent=indent, default=str))
                n += 1
                if not watch or (count is not None and n >= count):
                    return 0
                await asyncio.sleep(interval_seconds)
    finally:
        await sensors.close()


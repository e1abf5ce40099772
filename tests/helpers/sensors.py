"""``run_ticks(tmp_path, fake_args, seconds)``: the fake engine started under an
``EngineLauncher`` and the ``Sensors`` sampled every 0.1 s for ``seconds`` (canary after
0.4 s: ``QUICK_CANARY``); returns the Samples, oldest first."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.sense.gpu import GpuSensor
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.window import Window
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for

QUICK_CANARY = {"canary_after_seconds": 0.4, "canary_timeout_seconds": 0.6,
                "probe_timeout_seconds": 1.0}


async def sample_until(tmp_path: Path, fake_args: list[str], seconds: float,
                       sampling: dict, until=None, **sensor_kw):
    """The fake engine started under an ``EngineLauncher`` with ``sampling`` and the
    ``Sensors`` (``sensor_kw`` besides ``kernel=None``) sampled every 0.1 s for ``seconds``
    or until ``until(sample)``; everything stopped on the way out. Returns (Samples oldest
    first, the policy)."""
    policy = fake_engine_policy(tmp_path, fake_args=fake_args, sampling=sampling)
    launcher = EngineLauncher(policy)
    sensors = Sensors(policy, kernel=None, **sensor_kw)
    await sensors.start()
    window = Window()
    await launcher.start(rung=0)
    try:
        await wait_for(lambda: launcher.state is EngineState.READY)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            window.append(await sensors.sample(now_s=time.monotonic(),
                                               status=launcher.status(), window=window))
            if until is not None and until(window.latest):
                break
            await asyncio.sleep(0.1)
    finally:
        await sensors.close()
        await launcher.stop()
        await launcher.close()
    return list(window), policy


async def run_ticks(tmp_path: Path, fake_args: list[str], seconds: float):
    samples, _ = await sample_until(tmp_path, fake_args, seconds, QUICK_CANARY,
                                    gpu=GpuSensor())
    return samples

"""Issue 34: the tick survives EMFILE and ENOMEM in any sensor. Under 1,100 client
connections with ``ulimit -n 1024`` an unguarded ``psutil.cpu_percent`` (agent_supervisor/
sense/host.py) raised EMFILE, so no tick ran and no watchdog ping was sent. Each sensor's
read now fails to unknown (None) with its reason logged once."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agent_supervisor.sense import collect
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.sense.kernel_log import KernelLogFollower
from agent_supervisor.states import EngineState, EngineStatus
from agent_supervisor.telemetry.window import Window
from tests.helpers.paths import ROOT
from tests.helpers.policies import fake_engine_policy

#: Runs in a child under ``ulimit -n 1024`` (``RLIMIT_NOFILE``): every descriptor taken,
#: then one Sample; then the descriptors given back and another.
EXHAUSTED = """
import asyncio, json, resource, sys, time
from pathlib import Path
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.states import EngineState, EngineStatus
from agent_supervisor.telemetry.window import Window
from tests.helpers.policies import fake_engine_policy

async def main():
    sensors = Sensors(fake_engine_policy(Path(sys.argv[1])))
    await sensors.start()
    status = EngineStatus(state=EngineState.STOPPED, since_s=0.0)
    held = []
    try:
        while True:
            held.append(open("/dev/null"))
    except OSError as exc:
        full = exc.errno
    try:
        starved = await sensors.sample(now_s=time.monotonic(), status=status, window=Window())
    finally:
        for f in held:
            f.close()
    again = await sensors.sample(now_s=time.monotonic(), status=status, window=Window())
    await sensors.close()
    print(json.dumps({"errno": full, "held": len(held),
                      "starved": [starved.mem_available_bytes, starved.host_cpu_usage_ratio],
                      "again": [again.mem_available_bytes, again.host_cpu_usage_ratio]}))

asyncio.run(main())
"""


def test_issue_34_a_sample_is_taken_with_every_file_descriptor_in_use(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", EXHAUSTED, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["errno"] == errno.EMFILE and out["held"] > 900
    assert out["starved"] == [None, None]            # unknown, never 0, and no exception
    assert out["again"][0] > 0 and out["again"][1] is not None
    assert "host cpu unknown" in done.stderr


class _Nodes:
    """A node poller whose snapshot fails (the tick reads it last)."""

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def snapshot(self, now_s: float) -> tuple:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")


def _emfile(*args, **kwargs):
    raise OSError(errno.EMFILE, "Too many open files")


#: Each sensor broken where it reads, and a field it fills that must come back unknown.
BROKEN = {
    "host": ("agent_supervisor.sense.host.psutil.cpu_percent", "host_cpu_usage_ratio"),
    "meminfo": ("agent_supervisor.sense.host.parse_meminfo", "mem_available_bytes"),
    "process_tree": ("agent_supervisor.sense.collect.read_process_tree", "engine_rss_bytes"),
    "probes": ("agent_supervisor.sense.collect.Sensors._probe", "health_status"),
    "gateway": ("agent_supervisor.sense.collect.gateway_fields", "gateway_requests_in_flight"),
    "kernel_log": ("agent_supervisor.sense.kernel_log.KernelLogFollower.poll",
                   "kernel_events"),
    "canary": ("agent_supervisor.sense.collect.Sensors._canary_fields", "canary_pending"),
    "nodes": (None, "nodes"),
}


@pytest.mark.parametrize("sensor", sorted(BROKEN))
async def test_issue_34_any_sensor_that_raises_leaves_its_fields_unknown_not_the_tick(
        tmp_path: Path, sensor: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    target, field = BROKEN[sensor]
    if target is not None:
        monkeypatch.setattr(target, _emfile)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,1,-;boot\n")
    sensors = Sensors(fake_engine_policy(tmp_path), kernel=KernelLogFollower(
        kmsg_path=str(kmsg)), nodes=_Nodes() if sensor == "nodes" else None)
    await sensors.start()
    status = EngineStatus(state=EngineState.READY, since_s=0.0, run_id="r", pid=os.getpid())
    caplog.set_level(logging.WARNING, logger=collect.__name__)
    try:
        samples = [await sensors.sample(now_s=time.monotonic(), status=status,
                                        window=Window()) for _ in range(2)]
    finally:
        await sensors.close()
    for sample in samples:
        assert getattr(sample, field, None) is None
        assert sample.engine_state is EngineState.READY     # the rest of the sample is there
        assert sample.mem_total_bytes == psutil.virtual_memory().total or sensor == "meminfo"
    reasons = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    if sensor not in ("host", "meminfo"):                 # host.py logs its own reason
        assert len(reasons) == 1 and ("Too many open files" in reasons[0]
                                      or "Cannot allocate memory" in reasons[0])

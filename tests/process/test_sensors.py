"""Sensors against real processes: the fake engine serves recorded vLLM scrapes; the
canary goes out only when requests wait on a flat heartbeat, and tells a hung engine
from a slow one; the GPU is absent here and says so once."""

from __future__ import annotations

import time
from pathlib import Path

from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.sense.kernel_log import KernelLogFollower
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.window import Window
from tests.helpers.policies import fake_engine_policy
from tests.helpers.sensors import run_ticks


async def test_busy_scrape_with_a_flat_heartbeat_sends_a_canary(tmp_path: Path) -> None:
    # mtp2.busy: 4 requests running; the recorded counters never move.
    samples = await run_ticks(tmp_path, ["--metrics", "mtp2.busy.metrics.txt"], 2.0)
    last = samples[-1]
    assert last.requests_running == 4.0 and last.health_status == 200
    assert last.canary_ok is True and last.canary_latency_seconds < 0.6
    assert last.engine_core_alive is True and last.engine_processes == 2
    assert last.engine_rss_bytes > 0 and last.engine_pss_bytes > 0
    assert last.mem_available_bytes > 0
    # No GPU here: unknown, not zero.
    assert last.gpu_temperature_c is None and last.gpu_xid_events is None


async def test_hung_engine_fails_the_canary(tmp_path: Path) -> None:
    samples = await run_ticks(tmp_path, ["--metrics", "mtp2.busy.metrics.txt",
                                         "--hang-completions"], 2.0)
    finished = [s for s in samples if s.canary_finished_s is not None]
    assert finished and finished[-1].canary_ok is False


async def test_idle_engine_gets_no_canary(tmp_path: Path) -> None:
    samples = await run_ticks(tmp_path, ["--metrics", "mimo-mtp2.metrics.txt"], 1.5)
    assert all(not s.canary_pending and s.canary_ok is None for s in samples)
    assert samples[-1].requests_running == 0.0


async def test_kernel_log_unavailable_reads_as_unknown(tmp_path: Path) -> None:
    policy = fake_engine_policy(tmp_path)
    kernel = KernelLogFollower(kmsg_path=str(tmp_path / "none"),
                               journalctl=str(tmp_path / "no-journalctl"))
    sensors = Sensors(policy, kernel=kernel)
    await sensors.start()
    sample = await sensors.sample(now_s=time.monotonic(), window=Window(),
                                  status=EngineLauncher(policy).status())
    await sensors.close()
    assert sample.kernel_log_source == "unavailable" and sample.kernel_events is None
    assert sample.engine_state is EngineState.STOPPED and sample.health_status is None


async def test_kernel_events_reach_the_sample_once_each(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,1,-;boot line before the follower started\n")
    kernel = KernelLogFollower(kmsg_path=str(kmsg))
    sensors = Sensors(fake_engine_policy(tmp_path), kernel=kernel)
    await sensors.start()
    # Recorded lines (tests/fixtures/kernel/) in /dev/kmsg framing: one OOM kill prints two
    # lines naming pid 7899; then an Xid 31 of the engine core.
    with kmsg.open("a") as f:
        f.write("3,2,5000000,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
                "mems_allowed=0,global_oom,task_memcg=/init.scope,task=python,pid=7899,uid=0\n")
        f.write("3,3,5000001,-;Out of memory: Killed process 7899 (python) total-vm:26184840kB,"
                " anon-rss:15370088kB, file-rss:0kB, shmem-rss:0kB, UID:0\n")
        f.write("4,4,6000000,-;NVRM: Xid (PCI:0000:9a:00): 31, pid=477445, name=python3, "
                "channel 0x00000002, intr 00000000.\n")
    status = EngineLauncher(fake_engine_policy(tmp_path)).status()
    first = await sensors.sample(now_s=1.0, window=Window(), status=status)
    second = await sensors.sample(now_s=2.0, window=Window(), status=status)
    await sensors.close()
    assert first.kernel_log_source == "kmsg"
    assert first.kernel_events == ("oom_kill:7899", "xid:31")
    assert second.kernel_events == ()
    assert len(sensors.recent_kernel_lines) == 3


async def test_engine_log_lines_become_tags(tmp_path: Path) -> None:
    crash = (Path(__file__).parents[1] / "fixtures" / "engine_log"
             / "cpu-0.32.0-draft-head-dim-16-crash.txt").read_text().splitlines()
    sensors = Sensors(fake_engine_policy(tmp_path))
    await sensors.start()
    status = EngineLauncher(fake_engine_policy(tmp_path)).status()
    sample = await sensors.sample(now_s=1.0, window=Window(), status=status, log_lines=crash)
    await sensors.close()
    assert sample.engine_log_tags == ("engine_dead",)
    assert sample.kernel_events is None and sample.kernel_log_source is None
    assert any("EngineDeadError" in line for _, line in sensors.recent_engine_signatures)

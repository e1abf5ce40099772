"""Cost of one full tick (every sensor + decide) against the running CPU engine.

    .venv/bin/python benchmarks/tick_cost.py [--ticks 100] [--interval 0.2] [--load]

Starts the CPU engine in the demo's top mode (a copy of policies/cpu-demo.yaml on a free
port), then takes ``--ticks`` ticks exactly as the service does (all sensors: host,
process tree with PSS, /health + /metrics, canary check, GPU, kernel log, engine log;
then decide()), and prints the median and p95 of CPU time (this process, all threads)
and wall time per tick, the share of one core at a 1 s tick, the same figures for each
sensor alone, and the supervisor's RSS. ``--load`` runs 4 streaming clients in another
process meanwhile, so the engine is busy and the counters move.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_supervisor.act.launcher import EngineLauncher  # noqa: E402
from agent_supervisor.decide.decide import decide  # noqa: E402
from agent_supervisor.decide.ladder import LadderState  # noqa: E402
from agent_supervisor.policy import load_policy_file  # noqa: E402
from agent_supervisor.sense.collect import Sensors  # noqa: E402
from agent_supervisor.sense.engine_metrics import parse_metrics  # noqa: E402
from agent_supervisor.sense.gpu import GpuSensor  # noqa: E402
from agent_supervisor.sense.host import HostReader  # noqa: E402
from agent_supervisor.sense.kernel_log import KernelLogFollower  # noqa: E402
from agent_supervisor.sense.process_tree import read_process_tree  # noqa: E402
from agent_supervisor.telemetry.window import Window  # noqa: E402
from tests.conftest import free_port  # noqa: E402

LOAD = """
import httpx, sys, threading
url = sys.argv[1]
def loop():
    while True:
        try:
            with httpx.stream("POST", url, timeout=120, json={"model": "tiny-agent",
                    "max_tokens": 300, "stream": True, "messages": [{"role": "user",
                    "content": "I will read the file in main.py"}]}) as r:
                for _ in r.iter_lines():
                    pass
        except httpx.HTTPError:
            pass
for _ in range(4):
    threading.Thread(target=loop, daemon=True).start()
threading.Event().wait()
"""


def stats(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
    return f"median {statistics.median(values) * 1000:7.2f} ms  p95 {p95 * 1000:7.2f} ms"


def timed(fn, n: int) -> tuple[list[float], list[float]]:
    cpu, wall = [], []
    for _ in range(n):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return cpu, wall


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=100)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--load", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sup-tick-"))
    data = yaml.safe_load((ROOT / "policies" / "cpu-demo.yaml").read_text())
    data["engine"]["working_directory"] = str(ROOT)
    data["engine"]["port"] = free_port()
    data["storage"] = {"state_directory": str(tmp)}
    (tmp / "p.yaml").write_text(yaml.safe_dump(data))
    policy = load_policy_file(tmp / "p.yaml")
    launcher = EngineLauncher(policy)
    await launcher.start(rung=policy.initial_rung)
    while launcher.state.value != "ready":
        await asyncio.sleep(0.5)
    load = None
    if args.load:
        url = f"{launcher.base_url}/v1/chat/completions"
        load = subprocess.Popen([sys.executable, "-c", LOAD, url])
        await asyncio.sleep(3)
    sensors = Sensors(policy, gpu=GpuSensor(), kernel=KernelLogFollower())
    await sensors.start()
    window, ladder = Window(), LadderState.initial(policy)
    cpu, wall = [], []
    for _ in range(args.ticks):
        c0, w0 = time.process_time(), time.perf_counter()
        lines = launcher.run.log_tail.poll()
        now = time.monotonic()
        window.append(await sensors.sample(now_s=now, status=launcher.status(), window=window,
                                           log_lines=lines))
        decide(window, ladder, policy, now)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        await asyncio.sleep(args.interval)
    last = window.latest
    print(f"ticks: {args.ticks}, engine {'under load (4 streams)' if load else 'idle'}; "
          f"requests running at the end: {last.requests_running}, "
          f"generation tokens: {last.generation_tokens_total}")
    print(f"full tick   CPU  {stats(cpu)}")
    print(f"full tick   wall {stats(wall)}")
    print(f"share of one core at a 1 s tick (mean CPU per tick, PSS every "
          f"{policy.sampling.pss_interval_seconds:g} s included): "
          f"{statistics.fmean(cpu) * 100:.2f} % (target < 2 %)")
    host = HostReader()
    pid = launcher.run.pid
    metrics_text = httpx.get(f"{launcher.base_url}/metrics").text
    for name, fn in [("host (/proc/meminfo, PSI, cpu)", host.read),
                     ("process tree + PSS", lambda: read_process_tree(pid, pss=True)),
                     ("process tree, RSS only", lambda: read_process_tree(pid)),
                     (f"parse /metrics ({len(metrics_text)} bytes)",
                      lambda: parse_metrics(metrics_text)),
                     ("decide()", lambda: decide(window, ladder, policy, time.monotonic()))]:
        c, _ = timed(fn, 50)
        print(f"  {name:34s} CPU {stats(c)}")
    print(f"supervisor process RSS: {psutil.Process().memory_info().rss / 2**20:.1f} MiB")
    await sensors.close()
    if load is not None:
        load.kill()
        load.wait()
    await launcher.stop()
    await launcher.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

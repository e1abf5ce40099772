"""Foundation figures on the real CPU engine: time to ready per mode, supervisor RSS, and
the time from SIGKILL of the EngineCore to the next engine being launched.

    .venv/bin/python benchmarks/foundation.py [--kills 5] [--policy policies/cpu-demo.yaml]

Runs ``supervisor run`` on a copy of the policy (own port and state directory, a start
limit high enough that the kills never step down), once per mode for time to ready and
RSS, then kills the top mode's EngineCore ``--kills`` times. Prints one line per figure
and the medians. Times come from the store's records (UTC) against ``time.time()`` taken
just before each ``kill``; both read the same host clock.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_supervisor.record.store import Store  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.integration.conftest import engine_core_pid  # noqa: E402


def make_policy(src: Path, tmp: Path, mode: str) -> tuple[Path, str]:
    data = yaml.safe_load(src.read_text())
    data["engine"]["working_directory"] = str(ROOT)
    data["engine"]["port"] = free_port()
    data["initial_mode"] = mode
    # No backoff: measure detection and clean-up, not the policy's deliberate waits.
    data["restart"] = {"start_limit_burst": 100, "restart_delay_seconds": 0,
                       "restart_delay_max_seconds": 0}
    data["storage"] = {"state_directory": str(tmp / mode)}
    path = tmp / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, f"sqlite:///{tmp / mode}/supervisor.db"


def wait_ready_runs(store: Store, n: int, proc: subprocess.Popen, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"supervisor exited {proc.returncode}")
        try:
            runs = list(reversed(store.runs()))
        except Exception:  # noqa: BLE001 - schema not created yet
            runs = []
        if sum(r.ready_at is not None for r in runs) >= n:
            return runs
        time.sleep(0.1)
    raise SystemExit("timed out waiting for the engine")


def tree_rss(pid: int) -> int:
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return sum(p.memory_info().rss for p in procs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", type=Path, default=ROOT / "policies" / "cpu-demo.yaml")
    ap.add_argument("--kills", type=int, default=5)
    args = ap.parse_args()
    modes = [m["name"] for m in yaml.safe_load(args.policy.read_text())["modes"]]
    tmp = Path(tempfile.mkdtemp(prefix="sup-bench-"))
    for i, mode in enumerate(modes):
        path, url = make_policy(args.policy, tmp, mode)
        proc = subprocess.Popen([sys.executable, "-m", "agent_supervisor", "--log-level", "warning",
                                 "run", "--policy", str(path)], cwd=ROOT)
        time.sleep(1)
        store = Store.open(url, fleet="cpu-demo")
        (run,) = wait_ready_runs(store, 1, proc)
        sup_rss = psutil.Process(proc.pid).memory_info().rss
        print(f"mode {mode:8s} time to ready {run.startup_seconds:6.1f} s   engine tree RSS "
              f"{tree_rss(run.pid) / 2**30:5.2f} GiB   supervisor RSS {sup_rss / 2**20:5.1f} MiB",
              flush=True)
        if i == 0 and args.kills:
            latencies = []
            for k in range(args.kills):
                runs = list(reversed(store.runs()))
                t_kill = time.time()
                os.kill(engine_core_pid(runs[-1].pid), signal.SIGKILL)
                runs = wait_ready_runs(store, k + 2, proc)
                latency = runs[-1].started_at.timestamp() - t_kill
                latencies.append(latency)
                print(f"  kill {k + 1}: SIGKILL EngineCore -> next engine launched "
                      f"{latency * 1000:6.1f} ms (ready again after "
                      f"{runs[-1].startup_seconds:.1f} s)", flush=True)
            print(f"  median of {len(latencies)}: {statistics.median(latencies) * 1000:.1f} ms; "
                  f"supervisor RSS now {psutil.Process(proc.pid).memory_info().rss / 2**20:.1f} "
                  "MiB", flush=True)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        store.close()
        if code != 0:
            print(f"supervisor exited {code}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

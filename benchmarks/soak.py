"""Soak: the supervisor's RSS over a long run with the CPU engine and steady traffic.

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--warmup-minutes 5] [--sessions 4]

Runs ``supervisor run`` on a copy of policies/cpu-demo.yaml (own ports and state) with an
agent fleet streaming through its gateway the whole time, samples the supervisor
process's RSS every 30 s, and prints the series and the growth after the warm-up
(target: under 5%), plus the requests served and failed. Exits 1 when the growth
misses the target, 2 when the run was too short to judge.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_supervisor.chaos.harness import Rig  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--warmup-minutes", type=float, default=5)
    ap.add_argument("--sessions", type=int, default=4)
    args = ap.parse_args()
    os.environ.setdefault("SUPERVISOR_ADMIN_TOKEN", secrets.token_hex(8))
    rig = Rig(Path(tempfile.mkdtemp(prefix="soak-")))
    series = []
    try:
        rig.start()
        rig.ready_run()
        rig.start_fleet(sessions=args.sessions)
        proc = psutil.Process(rig.proc.pid)
        t0 = time.monotonic()
        while (elapsed := time.monotonic() - t0) < args.minutes * 60:
            rss = proc.memory_info().rss
            series.append((elapsed, rss))
            ok = sum(r.ok for r in rig.records)
            print(f"{elapsed / 60:5.1f} min  supervisor RSS {rss / 2**20:6.1f} MiB  "
                  f"requests ok {ok}  failed {len(rig.records) - ok}", flush=True)
            time.sleep(30)
    finally:
        rig.close()
    warm = [rss for t, rss in series if t >= args.warmup_minutes * 60]
    growth = None
    if len(warm) >= 2:
        growth = (warm[-1] - warm[0]) / warm[0]
        print(f"\nRSS after warm-up: {warm[0] / 2**20:.1f} -> {warm[-1] / 2**20:.1f} MiB "
              f"(max {max(warm) / 2**20:.1f}): growth {growth:+.1%} over "
              f"{(series[-1][0] - args.warmup_minutes * 60) / 60:.0f} min (target < 5%)")
    total, ok = len(rig.records), sum(r.ok for r in rig.records)
    print(f"requests: {total} through the gateway, {total - ok} failed")
    if growth is None:
        print("too short to judge: no two samples after the warm-up")
        return 2
    return 0 if growth < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())

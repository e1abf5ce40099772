"""Is the day benchmark's top rung faster than plain decoding? Each of its first two
rungs under the day's agent load, no faults.

    .venv/bin/python benchmarks/day_speed.py [--sessions 2,6] [--seconds 30]

For rung ``fast`` (n-gram speculation k=5) and rung ``nospec``: one engine under the
plain restart loop of ``agent_supervisor/chaos/day_arms.py``, then the day's fleet
(``agent_supervisor/chaos/day_faults.Load``) for ``--seconds`` at each session count; prints
completion tokens/s in total and per request, and the requests that failed. Wrap it in
``flock /tmp/engine.lock`` on a shared box; the ratio fast/nospec is the figure (both
measured in the same run, one after the other).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_supervisor.chaos.day import overrides  # noqa: E402
from agent_supervisor.chaos.day_arms import RestartLoop, write_policy  # noqa: E402
from agent_supervisor.chaos.day_faults import Load  # noqa: E402
from agent_supervisor.chaos.day_schedule import Day  # noqa: E402
from agent_supervisor.chaos.harness import chaos_policy  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", default="2,6", help="agent counts (default 2,6)")
    ap.add_argument("--seconds", type=float, default=30.0, help="load per count (default 30)")
    args = ap.parse_args()
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="day-speed-"))
    for rung in (0, 1):
        state = base / f"rung{rung}"
        state.mkdir()
        day = Day("speed", 1, args.seconds, ())
        policy = write_policy(state, chaos_policy(state, **overrides(day, 2 << 30,
                                                                     state / "armed")))
        arm = RestartLoop(policy, rung, state)
        arm.start()
        arm.wait_ready(600)
        try:
            for n in (int(x) for x in args.sessions.split(",")):
                load = Load(arm.base_url, Day("speed", 1, args.seconds, (), sessions=n))
                load.start()
                t = time.time()
                time.sleep(args.seconds)
                load.stop(120)
                elapsed = time.time() - t
                ok = [r for r in load.records if r.ok]
                tokens = sum(r.completion_tokens for r in ok)
                per = sum(r.completion_tokens / r.duration_seconds for r in ok) / max(1, len(ok))
                print(f"{policy.modes[rung].name:7s} sessions {n}: {tokens / elapsed:7.1f} "
                      f"tok/s total, {per:6.1f} tok/s/req, {len(ok)} ok, "
                      f"{len(load.records) - len(ok)} failed", flush=True)
        finally:
            arm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

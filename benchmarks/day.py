"""A compressed day of agent work under faults: always-fast vs always-safe vs supervised.

    .venv/bin/python benchmarks/day.py [--short] [--seed 1] [--dir DIR] [--arms a,b,c]

The same agent fleet and the same fault schedule (EngineCore crash, hang, a burst of
long prompts, a crash that repeats with speculation on, memory pressure to the floor,
a calm tail) against the real CPU engine, arm after arm: the top rung under a plain
restart loop, the bottom rung under the same loop, and ``supervisor run`` on the whole
ladder with its gateway. Prints the table (tasks completed and failed, tokens delivered,
requests failed, time with no engine serving, TTFT p50/p99, ratios), writes it as JSON
with the supervised arm's incidents and transitions. ``--short``: the CI smoke (one
fault, about 3 minutes). Same as ``supervisor bench --day``; the harness is
``agent_supervisor/chaos/day.py``. Wrap it in ``flock /tmp/engine.lock`` on a shared box.
Exit status: 0; 1 when the supervised arm failed a task; 3 when a process was left.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_supervisor.chaos.day import main_day  # noqa: E402
from agent_supervisor.chaos.day_report import ARMS  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="the CI smoke: one fault, ~3 min")
    ap.add_argument("--seed", type=int, default=1, help="the schedule's seed (default 1)")
    ap.add_argument("--dir", type=Path, default=None,
                    help="state, logs and JSON (default: a new temporary directory)")
    ap.add_argument("--arms", default=",".join(ARMS),
                    help=f"comma-separated, in order (default {','.join(ARMS)})")
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    return main_day(short=args.short, seed=args.seed, base=args.dir,
                    arms=tuple(a for a in args.arms.split(",") if a))


if __name__ == "__main__":
    sys.exit(main())

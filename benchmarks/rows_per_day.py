"""Rows one box writes to the record per day (issue 16: one PostgreSQL for N boxes).

    PYTHONPATH=. .venv/bin/python benchmarks/rows_per_day.py [SECONDS]

Runs one in-process supervisor (the fake engine from tests/helpers, idle; the shipped
defaults for sampling and storage: 1 s tick, 30 s heartbeat, 10 s telemetry rows written
six at a time) on a fresh SQLite database for SECONDS (default 300), stops it cleanly,
and prints the rows of each table and that count scaled to a day. The memory floor is set
to 512 MiB so that a shared, busy box does not turn the run into a string of emergency
kills (their incidents are not what a healthy box writes).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import text

from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from tests.conftest import fake_engine_policy

TABLES = ("telemetry", "incidents", "mode_transitions", "engine_runs", "service_runs",
          "applied_records")


async def main(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        policy = fake_engine_policy(Path(tmp), gateway={"enabled": False},
                                    guards={"memory_floor": {"min_available_bytes": 2**29}})
        store = Store.open(policy.database_url, fleet=policy.fleet)
        sup = Supervisor(policy, store)
        task = asyncio.create_task(sup.run())
        t0 = time.monotonic()
        await asyncio.sleep(seconds)
        sup.request_stop("measured")
        await task
        took = time.monotonic() - t0
        with store.session() as s:
            for table in TABLES:
                n = s.execute(text(f"select count(*) from {table}")).scalar() or 0
                print(f"{table}: {n} rows in {took:.0f} s -> {n * 86400 / took:.0f} per day")
        store.close()


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 300.0))

"""The spool under real kill -9: a writer process is SIGKILLed mid-append again and
again, each new life opening the spool the last one left; no record ``append``
acknowledged is lost, and every line of the file still parses (issue 17: a torn last
line used to swallow the next life's first record, 1 in 40 kills).

Records carry a log tail of 0.5-3 MiB, so one append is several pages and a SIGKILL
lands inside the write often (the kernel stops a write between pages on a fatal signal).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent_supervisor.record.spool import Spool

#: Lives killed; about 1 s each (the child's imports dominate).
KILLS = int(os.environ.get("SUPERVISOR_SPOOL_KILLS", "30"))

_CHILD = r"""
import random, sys
from datetime import UTC, datetime
from pathlib import Path
from agent_supervisor.record.records import AddIncident, Incident, StartService
from agent_supervisor.record.spool import Spool

spool = Spool(Path(sys.argv[1]))
print("torn", getattr(spool, "torn_cut", 0), flush=True)
rnd = random.Random(int(sys.argv[2]))
i = 0
while True:
    i += 1
    now = datetime.now(UTC)
    if i % 3:
        rec = AddIncident(incident=Incident(
            kind="exited", severity="critical", started_at=now, action="restart",
            explanation=f"crash {i}", log_tail="x" * rnd.randint(512 * 1024, 3 * 1024 * 1024)))
    else:
        rec = StartService(service_run_id=f"{sys.argv[2]}-{i}", pid=i, boot_id=None,
                           started_at=now)
    spool.append(rec)
    if not spool._memory:          # on disk and fsynced: acknowledged
        print("ack", rec.key, flush=True)
"""


def test_issue_17_kill_9_mid_append_loses_no_acknowledged_record(tmp_path: Path) -> None:
    path = tmp_path / "spool.jsonl"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    rnd = random.Random(17)
    acked: list[str] = []
    torn = 0
    for life in range(KILLS):
        out = tmp_path / f"life-{life}.out"
        with open(out, "w") as f:
            child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), str(life)],
                                     stdout=f, env=env)
        deadline = time.monotonic() + 60
        while "ack" not in out.read_text() and time.monotonic() < deadline \
                and child.poll() is None:
            time.sleep(0.01)
        time.sleep(rnd.uniform(0.0, 0.25))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        lines = out.read_text().splitlines()
        torn += int(lines[0].split()[1]) > 0 if lines else 0
        acked += [line.split()[1] for line in lines[1:] if line.startswith("ack ")]
    spool = Spool(path)
    torn += getattr(spool, "torn_cut", 0) > 0
    seen: list[str] = []
    result = spool.replay(lambda record: seen.append(record.key) or True)
    lost = set(acked) - set(seen)
    print(f"{KILLS} kills, {len(acked)} acknowledged, {torn} torn lines cut, "
          f"{len(lost)} lost, {result.rejected} rejected")
    assert acked and not lost
    assert result.rejected == 0 and result.applied == len(seen)

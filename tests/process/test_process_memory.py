"""Issue 29, item 5: the process sensor reads RssAnon and VmSwap of the engine's tree from
the real /proc of a real child process (a leak that hides in swap keeps VmRSS flat while
RssAnon + VmSwap grows: ollama #18106)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent_supervisor.sense.process_tree import read_process_tree, read_status_memory

MiB = 2**20
# A child that holds 96 MiB of anonymous memory it has written (so it is resident), and
# a grandchild that holds 32 MiB, then waits.
CHILD = """
import subprocess, sys, time
held = bytearray(96 * 2**20)
for i in range(0, len(held), 4096):
    held[i] = 1
sub = subprocess.Popen([sys.executable, "-c",
    "b = bytearray(32 * 2**20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\n"
    "import sys; print('ok', flush=True); import time; time.sleep(60)"],
    stdout=subprocess.PIPE, text=True)
sub.stdout.readline()
print("ready", flush=True)
time.sleep(60)
"""


def test_issue_29_rss_anon_and_swap_of_a_real_tree() -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    pids: tuple[int, ...] = ()
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        tree = read_process_tree(proc.pid)
        pids = tree.pids
        assert tree.processes == 2
        own = read_status_memory(proc.pid)
        assert own is not None and own[0] >= 96 * MiB
        assert tree.rss_anon_bytes is not None and tree.swap_bytes is not None
        # Both processes' anonymous memory, summed (the interpreters add their own).
        assert tree.rss_anon_bytes >= (96 + 32) * MiB
        # What /proc says for each, summed, is what the tree reports.
        status = [Path(f"/proc/{pid}/status").read_text() for pid in tree.pids]
        kb = sum(int(line.split()[1]) for text in status for line in text.splitlines()
                 if line.startswith("VmSwap:"))
        assert abs(tree.swap_bytes - kb * 1024) <= 64 * 1024
    finally:
        for pid in reversed(pids):          # the grandchild this test started, then the child
            if pid != proc.pid:
                os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    time.sleep(0.05)
    gone = read_process_tree(proc.pid)
    assert gone.processes == 0 and gone.rss_anon_bytes is None


def test_issue_29_status_of_no_process_is_unknown() -> None:
    assert read_status_memory(2**22 + 12345) is None


async def test_issue_29_the_sensors_fill_the_new_fields_from_a_real_engine_process(
        tmp_path: Path) -> None:
    from tests.helpers.sensors import run_ticks
    # plain.busy (vLLM 0.32.0): request_success_total{finished_reason="length"} 3.0, the
    # other reasons 0.0; waiting by reason 0 and 0.
    samples = await run_ticks(tmp_path, ["--metrics", "plain.busy.metrics.txt"], 1.5)
    last = samples[-1]
    assert last.requests_finished_total == 3.0
    assert last.requests_waiting_capacity == 0.0 and last.requests_waiting_deferred == 0.0
    # The fake engine's two processes: their anonymous memory (a Python interpreter holds
    # several MiB), and their swap (0 or more, read, not unknown).
    assert last.engine_rss_anon_bytes is not None and last.engine_rss_anon_bytes > 4 * MiB
    assert last.engine_swap_bytes is not None and last.engine_swap_bytes >= 0

"""The engine's process tree read from real processes titled the way vLLM titles them
(``VLLM::EngineCore``, ``VLLM::Worker_TP0``: vllm/utils/system_utils.py set_process_title)."""

from __future__ import annotations

import subprocess
import sys
import time

from agent_supervisor.sense.process_tree import read_process_tree

# The "API server" starts two children with vLLM's process titles as argv[0], prints
# their pids and sleeps.
PARENT = """
import subprocess, sys, time
kids = [subprocess.Popen(["VLLM::EngineCore", "-c", "import time; time.sleep(60)"],
                         executable=sys.executable),
        subprocess.Popen(["VLLM::Worker_TP0", "-c", "import time; time.sleep(60)"],
                         executable=sys.executable)]
print(*[k.pid for k in kids], flush=True)
time.sleep(60)
"""


def test_roles_liveness_rss_and_pss_of_a_real_tree() -> None:
    api = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    core_pid = worker_pid = None
    try:
        core_pid, worker_pid = map(int, api.stdout.readline().split())
        time.sleep(0.5)                       # let the children reach sleep()
        tree = read_process_tree(api.pid, pss=True)
        assert tree.api_server_alive and tree.engine_core_alive
        assert set(tree.pids) == {api.pid, core_pid, worker_pid}
        assert tree.api_server_rss_bytes and tree.engine_core_rss_bytes \
            and tree.workers_rss_bytes
        assert tree.rss_bytes == (tree.api_server_rss_bytes + tree.engine_core_rss_bytes
                                  + tree.workers_rss_bytes)
        assert tree.pss_bytes is not None and 0 < tree.pss_bytes <= tree.rss_bytes

        subprocess.run(["kill", "-9", str(core_pid)], check=True)
        time.sleep(0.3)                       # a zombie until the parent reaps it
        after = read_process_tree(api.pid)
        assert after.api_server_alive and not after.engine_core_alive
        assert core_pid not in after.pids and after.pss_bytes is None   # pss not asked
    finally:
        for pid in (worker_pid, core_pid):
            if pid is not None:
                subprocess.run(["kill", "-9", str(pid)], stderr=subprocess.DEVNULL)
        api.kill()
        api.wait()
        api.stdout.close()
    assert not read_process_tree(api.pid).api_server_alive

"""Issue 34: the day benchmark's fault injector ended the whole benchmark with a
traceback when a fault met an EngineCore killed a moment before: ``psutil.ZombieProcess``
escaped ``Rig.child``. Real processes: a parent that never reaps its dead child."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from agent_supervisor.chaos.harness import Rig

# A parent with a zombie child (forked, exited, never reaped) and, if asked, a live
# child whose process title starts with VLLM::EngineCore.
PARENT = """
import os, subprocess, sys, time
zombie = os.fork()
if zombie == 0:
    os._exit(0)
core = 0
if sys.argv[1] == "core":
    core = subprocess.Popen(["VLLM::EngineCore", "60"], executable="/bin/sleep").pid
print(zombie, core, flush=True)
time.sleep(60)
"""


@pytest.fixture(params=["core", "no-core"])
def parent(request) -> Iterator[tuple[int, int, int]]:
    proc = subprocess.Popen([sys.executable, "-c", PARENT, request.param],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    zombie, core = map(int, proc.stdout.readline().split())
    deadline = time.monotonic() + 10
    while psutil.Process(zombie).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child never became a zombie"
        time.sleep(0.05)
    yield proc.pid, zombie, core
    for child in psutil.Process(proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.kill()
    proc.kill()
    proc.wait()
    proc.stdout.close()


def test_issue_34_a_zombie_child_is_passed_over(parent: tuple[int, int, int]) -> None:
    api, zombie, core = parent
    with pytest.raises(psutil.ZombieProcess):     # what escaped before
        psutil.Process(zombie).cmdline()
    if core:
        assert Rig.child(api, "VLLM::EngineCore") == core
    else:
        with pytest.raises(AssertionError, match="no VLLM::EngineCore under"):
            Rig.child(api, "VLLM::EngineCore")


def test_issue_34_a_parent_gone_is_no_child_not_a_psutil_error() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(AssertionError, match="no VLLM::EngineCore under"):
        Rig.child(proc.pid, "VLLM::EngineCore")

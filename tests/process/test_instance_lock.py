"""The single-instance lock of a state directory (issue 18), on a real flock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_supervisor.errors import AlreadyRunning
from agent_supervisor.runtime.lock import InstanceLock


def test_issue_18_a_second_holder_is_refused_naming_the_first_pid(tmp_path: Path) -> None:
    first = InstanceLock(tmp_path / "state")
    first.acquire()
    with pytest.raises(AlreadyRunning) as caught:
        InstanceLock(tmp_path / "state").acquire()
    assert caught.value.pid == os.getpid()
    assert f"pid {os.getpid()}" in str(caught.value)
    first.release()
    again = InstanceLock(tmp_path / "state")
    again.acquire()                                   # free once released
    again.release()


def test_a_dead_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    code = ("import os, sys; from pathlib import Path; "
            "from agent_supervisor.runtime.lock import InstanceLock; "
            f"InstanceLock(Path({str(tmp_path / 'state')!r})).acquire(); os._exit(9)")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ,
                          "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 9                       # died holding it, no release
    lock = InstanceLock(tmp_path / "state")
    lock.acquire()
    lock.release()

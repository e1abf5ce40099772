"""Issue 34's acceptance: "A process named like an Xid line, OOM-killed, does not change the
ladder", with a real kernel OOM kill read from the real /dev/kmsg.

A child names itself ``Xid (PCI:0): 79`` (prctl(PR_SET_NAME), comm is at most 15 characters),
joins a fresh memory cgroup limited to 64 MiB (cgroup v1 ``memory.limit_in_bytes`` or v2
``memory.max``) and allocates until the kernel's OOM killer kills it. The kernel prints the
name in five lines (tests/fixtures/kernel/oom_kill_named_like_xid.txt); the follower must
report the OOM kill and no Xid, and the real ``decide()`` fed those events and lines must not
decide reboot_required. Needs root, a readable /dev/kmsg and a writable memory cgroup.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.sense.kernel_log import KernelEvent, KernelLogFollower
from agent_supervisor.sense.reclassify import kernel_event_tag, kernel_tags
from tests.unit.scenario import play, samples

NAME = "Xid (PCI:0): 79"
LIMIT_BYTES = 64 << 20
CHILD = f"""
import ctypes
ctypes.CDLL(None).prctl(15, {NAME.encode()!r}, 0, 0, 0)  # PR_SET_NAME
blocks = []
while True:
    blocks.append(bytearray(8 << 20))
"""


def memory_cgroup() -> tuple[Path, str] | None:
    """(a writable directory to make a child cgroup in, its limit file name), or None."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            base, limit = Path("/sys/fs/cgroup/memory") / path.lstrip("/"), "memory.limit_in_bytes"
        elif controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            base, limit = Path("/sys/fs/cgroup") / path.lstrip("/"), "memory.max"
        else:
            continue
        if (base / limit).exists() and os.access(base, os.W_OK):
            return base, limit
    return None


def why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root to make a memory cgroup"
    if not os.access("/dev/kmsg", os.R_OK):
        return "/dev/kmsg not readable here"
    if memory_cgroup() is None:
        return "no writable memory cgroup here"
    return None


@pytest.mark.skipif(why_not() is not None, reason=str(why_not()))
def test_issue_34_an_oom_killed_process_named_like_an_xid_does_not_change_the_ladder(
    tmp_path: Path,
) -> None:
    found = memory_cgroup()
    assert found is not None
    base, limit = found
    group = base / f"issue34-xid-oom-{os.getpid()}"
    group.mkdir()
    follower = KernelLogFollower(journalctl=str(tmp_path / "no-journalctl"))
    try:
        (group / limit).write_text(str(LIMIT_BYTES))
        assert follower.start() == "kmsg"
        procs = str(group / "cgroup.procs")
        child = subprocess.Popen(  # preexec_fn: join the cgroup before exec
            [sys.executable, "-c", CHILD],
            preexec_fn=lambda: Path(procs).write_text(str(os.getpid())),
        )
        assert child.wait(timeout=60) == -9  # SIGKILL from the OOM killer
        events: list[KernelEvent] = []
        lines: list[str] = []
        deadline = time.monotonic() + 10
        while (
            not any(
                e.kind == "oom_kill" and e.pid == child.pid and "Killed process" in e.message
                for e in events
            )
            and time.monotonic() < deadline
        ):
            events += follower.poll()
            lines += follower.last_lines
            time.sleep(0.05)
    finally:
        follower.close()
        group.rmdir()
    mine = [e for e in events if e.pid == child.pid]
    assert {(e.kind, e.process) for e in mine} == {("oom_kill", NAME)}, events
    assert any(NAME in line and "invoked oom-killer" in line for line in lines)  # kept raw
    assert not [e for e in events if e.kind in ("xid", "gpu_lost")], events
    tags = tuple(dict.fromkeys(kernel_event_tag(e) for e in events))
    assert f"oom_kill:{child.pid}" in tags
    assert set(kernel_tags(lines)) == set(tags)  # replay re-classifies the same
    decisions, ladder = play(
        samples(0, 5, kernel_events=tags, kernel_lines=tuple(lines)), LadderState(rung=0)
    )
    print(
        f"{len(lines)} kernel lines kept, tags {tags}, "
        f"decisions {[d.action.value for d in decisions]}"
    )
    assert all(d.action is Action.HOLD for d in decisions), decisions[0].explanation
    assert (ladder.rung, ladder.reboot_required) == (0, None)

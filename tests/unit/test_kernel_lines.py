"""Issue 34: kernel lines count only where the kernel writes them.

A task's comm is printed inside kernel lines (OOM killer, call-trace headers, the task table),
so a process named like an Xid line put "Xid (PCI:0): 79" into the kernel log and the old,
unanchored pattern read it as Xid 79 (reboot required). The records below were read from
/dev/kmsg of this project's VM after a real cgroup OOM kill of such a process
(tests/fixtures/kernel/README.md, ``oom_kill_named_like_xid.txt``).
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_supervisor.sense.kernel_lines import (
    KernelEvent,
    classify_kernel_line,
    classify_kernel_message,
    kmsg_facility,
    parse_kmsg_record,
)
from agent_supervisor.sense.kernel_log import KernelLogFollower, journal_kernel_message

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kernel"
RECORDS = (FIXTURES / "oom_kill_named_like_xid.txt").read_text().splitlines()
XID_79 = "NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus."  # field fixture's line


def test_a_real_oom_kill_of_a_process_named_like_an_xid_gives_no_xid() -> None:
    events = [classify_kernel_message(parse_kmsg_record(r)[2]) for r in RECORDS]
    assert [e.kind if e else None for e in events] == [
        None,
        None,
        None,
        "oom_kill",
        "oom_kill",
        None,
    ]
    assert {(e.pid, e.process) for e in events if e} == {(7829, "Xid (PCI:0): 79")}
    # The same lines as pasted or replayed (prefix-tolerant form): still no Xid.
    assert all(
        classify_kernel_line(parse_kmsg_record(r)[2]) is None
        or classify_kernel_line(parse_kmsg_record(r)[2]).kind == "oom_kill"
        for r in RECORDS
    )


def test_the_follower_skips_lines_written_from_user_space(tmp_path: Path) -> None:
    """A fake Xid written into /dev/kmsg gets facility 1 (the last fixture record shows the
    kernel forcing it); the same text with facility 0 is the kernel's and counts."""
    path = tmp_path / "kmsg"
    path.touch()
    follower = KernelLogFollower(kmsg_path=str(path), journalctl=str(tmp_path / "none"))
    try:
        assert follower.start() == "kmsg"
        with path.open("a") as out:
            out.write("\n".join(RECORDS) + "\n")
            out.write(f"12,421,350955900,-;{XID_79}\n")  # user.warning: skipped
            out.write(f"4,422,350956000,-;{XID_79}\n")  # kern.warning: counts
        events = follower.poll()
        assert [(e.kind, e.code, e.pid) for e in events] == [
            ("oom_kill", None, 7829),
            ("oom_kill", None, 7829),
            ("xid", 79, None),
        ]
        assert events[-1].monotonic_s == 350.956
        assert XID_79 in follower.last_lines and follower.last_lines.count(XID_79) == 1
        assert not any("facility check" in line for line in follower.last_lines)
    finally:
        follower.close()


def test_kmsg_facility_is_pri_shifted_by_three() -> None:
    assert [kmsg_facility(r) for r in RECORDS] == [0, 0, 0, 0, 0, 1]
    assert kmsg_facility("30,340,5690716,-;udevd[80]: starting version 181") == 3  # ABI doc
    assert kmsg_facility("no record") is None


def test_journal_entries_that_are_not_the_kernels_are_skipped() -> None:
    kernel = json.dumps(
        {
            "_TRANSPORT": "kernel",
            "SYSLOG_FACILITY": "0",
            "MESSAGE": XID_79,
            "_SOURCE_MONOTONIC_TIMESTAMP": "5000000",
        }
    )
    assert journal_kernel_message(kernel) == (XID_79, 5.0)
    assert (
        journal_kernel_message(kernel.replace('"SYSLOG_FACILITY": "0"', '"SYSLOG_FACILITY": "1"'))
        is None
    )  # kmsg write
    assert journal_kernel_message(kernel.replace('"kernel"', '"syslog"')) is None  # logger
    assert journal_kernel_message(kernel.replace('"SYSLOG_FACILITY": "0",', "")) is None
    as_bytes = json.dumps(
        {"_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0", "MESSAGE": list(b"NVRM: \xff")}
    )
    assert journal_kernel_message(as_bytes) == ("NVRM: \ufffd", None)
    for bad in (
        "",
        "[]",
        "null",
        '{"MESSAGE":1}',
        "{" * 100_000,
        '{"_TRANSPORT":"kernel","SYSLOG_FACILITY":"0","MESSAGE":"x","__MONOTONIC_TIMESTAMP":"-1"}',
    ):
        found = journal_kernel_message(bad)
        assert found is None or found == ("x", None)


def test_user_text_inside_kernel_lines_is_not_an_event() -> None:
    """Other places a user's text reaches the kernel log: a path in an AppArmor denial, a
    comm after "Comm:" in a call-trace header."""
    looks_like = [
        'audit: type=1400 audit(1.2:3): apparmor="DENIED" operation="open" '
        f'name="/tmp/{XID_79}" comm="cat"',
        "CPU: 1 UID: 0 PID: 7829 Comm: NVRM: Xid (PCI:0 Not tainted 6.18.44 #1",
        "Out of memory: Killed process 12 (NVRM: Xid (PCI:) total-vm:1kB, anon-rss:0kB",
        "[12.5] NVRM: Xid invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0",
    ]
    for line in looks_like:
        kinds = {e.kind for e in (classify_kernel_message(line), classify_kernel_line(line)) if e}
        assert "xid" not in kinds and "gpu_lost" not in kinds, line


COMM = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=15)


@settings(max_examples=300, deadline=None)
@given(comm=COMM, pid=st.integers(1, 4_194_304))
def test_no_comm_turns_a_kernel_line_into_an_xid_or_another_pid(comm: str, pid: int) -> None:
    """Every kernel line format that prints a comm (mm/oom_kill.c, lib/dump_stack.c, the
    driver's Xid name=), with any comm of at most 15 characters (TASK_COMM_LEN - 1)."""
    oom = [
        f"{comm} invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        f"CPU: 1 UID: 0 PID: {pid} Comm: {comm} Not tainted 6.18.44-fc-v1045 #1",
        f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        f"task={comm},pid={pid},uid=0",
        f"Memory cgroup out of memory: Killed process {pid} ({comm}) total-vm:82312kB, "
        "anon-rss:65280kB, file-rss:6800kB, shmem-rss:0kB, UID:0 pgtables:200kB",
    ]
    for line in oom:
        for event in (classify_kernel_message(line), classify_kernel_line(line)):
            assert event is None or (event.kind == "oom_kill" and event.pid == pid), line
    xid = classify_kernel_message(
        f"NVRM: Xid (PCI:0000:01:00): 13, pid={pid}, name={comm}, Ch 00000001"
    )
    assert xid is not None and (xid.kind, xid.code, xid.pid) == ("xid", 13, pid)


def test_real_lines_still_give_their_events() -> None:
    assert classify_kernel_message(XID_79) == KernelEvent("xid", XID_79, 79)
    assert classify_kernel_line(f"Apr 29 19:24:11 EVE kernel: {XID_79}").code == 79

"""The kernel log parser on recorded lines, and the follower on a real file, FIFO and pipe.

Fixtures and the source of every line: tests/fixtures/kernel/README.md.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_supervisor.sense import kernel_log
from agent_supervisor.sense.kernel_lines import strip_log_prefix
from agent_supervisor.sense.kernel_log import (
    KernelEvent,
    KernelLogFollower,
    classify_kernel_line,
    parse_kmsg_record,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kernel"


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


XID = lines("xid.txt")
NO_MEMORY = lines("nv_err_no_memory.txt")
OOM = lines("oom_kill.txt")

# (code, pid, process) per line of xid.txt
XID_EXPECTED = [
    (31, 169800, "chrome"),
    (31, 13332, "cuda_plot_k32_v"),
    (31, 477445, "python3"),
    (31, None, None),
    (43, 74059, "train_gpt2_bf16"),
    (13, None, None),
    (13, None, None),
    (45, None, None),
    (45, 1818990, "python3"),
    (79, None, None),
    (109, 1797828, "pt_main_thread"),
    (119, 11431, "gpu-feature-dis"),
]

# (pid, process) per line of oom_kill.txt
OOM_EXPECTED = [
    (7899, "python"),
    (7899, "python"),
    (15784, "python3"),
    (15925, "(resolved)"),
    (140339, "python3"),
]


@pytest.mark.parametrize(("line", "expected"), list(zip(XID, XID_EXPECTED, strict=True)))
def test_real_xid_lines(line: str, expected: tuple[int, int | None, str | None]) -> None:
    code, pid, process = expected
    assert classify_kernel_line(line) == KernelEvent(
        kind="xid", message=line, code=code, pid=pid, process=process
    )


def test_gb10_xid_form() -> None:
    """GB10 (DGX Spark): PCI domain 000f and the newer 'channel 0x..' wording."""
    event = classify_kernel_line(XID[4])
    assert event is not None
    assert (event.code, event.pid, event.process) == (43, 74059, "train_gpt2_bf16")


@pytest.mark.parametrize("line", NO_MEMORY[:3])
def test_real_nv_err_no_memory_lines(line: str) -> None:
    assert classify_kernel_line(line) == KernelEvent(kind="nv_err_no_memory", message=line)


def test_the_second_half_of_a_wrapped_record_is_not_a_kernel_message() -> None:
    """Issue 34: patterns are anchored at the message start; no message starts "(0x..."."""
    assert classify_kernel_line(NO_MEMORY[3]) is None


@pytest.mark.parametrize(("line", "expected"), list(zip(OOM, OOM_EXPECTED, strict=True)))
def test_real_oom_kill_lines(line: str, expected: tuple[int, str]) -> None:
    pid, process = expected
    assert classify_kernel_line(line) == KernelEvent(
        kind="oom_kill", message=line, pid=pid, process=process
    )


@pytest.mark.parametrize("line", lines("unclassified.txt"))
def test_real_lines_that_are_not_events(line: str) -> None:
    assert classify_kernel_line(line) is None


def records(text: str) -> list[str]:
    """Split concatenated /dev/kmsg reads back into records (continuations start with ' ')."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(" ") and out:
            out[-1] += line
        else:
            out.append(line)
    return out


KMSG_EXPECTED = [
    (4, 0, "[Firmware Bug]: TSC doesn't count with P0 frequency!"),
    (6, 51, "tsc: Detected 2596.146 MHz processor"),
    (7, 399, "e820: update [mem 0x00000000-0x00000fff] usable ==> reserved"),
    (6, 586, "x86/PAT: Configuration [0-7]: WB  WC  UC- UC  WB  WP  UC- WT  "),
    (6, 239387, r"rcu: \x09RCU restricting CPUs from NR_CPUS=256 to nr_cpu_ids=2."),
    (
        6,
        298319,
        "acpi PNP0A08:00: _OSC: OS supports [ExtendedConfig ASPM ClockPM Segments MSI HPX-Type3]",
    ),
    (6, 298656, "pci 0000:00:00.0: [8086:0d57] type 00 class 0x060000 conventional PCI endpoint"),
    (4, 360258, "software IO TLB: No low mem"),
    (5, 419555, "virtio_blk virtio1: [vda] 536870912 512-byte logical blocks (275 GB/256 GiB)"),
    (
        4,
        423058,
        r"amd_pstate: The CPPC feature is supported but currently disabled by the BIOS."
        r"\x0aPlease enable it if your BIOS has the CPPC option.",
    ),
    (7, 467674, "  with arguments:"),
    (5, 1301878, "random: crng reseeded due to virtual machine fork"),
    (
        6,
        1392046,
        "EXT4-fs (vda): mounted filesystem 00000000-0000-0000-0000-000000000000 r/w "
        "without journal. Quota mode: none.",
    ),
]


def test_parse_real_kmsg_records() -> None:
    raw = records((FIXTURES / "kmsg_records.txt").read_text())
    parsed = [parse_kmsg_record(record) for record in raw]
    assert parsed == [(level, usec / 1_000_000, msg) for level, usec, msg in KMSG_EXPECTED]
    assert all(classify_kernel_line(message) is None for _, _, message in parsed)


def test_parse_the_abi_documents_examples() -> None:
    """Documentation/ABI/testing/dev-kmsg, verbatim; PRI 30 is facility 3, level 6."""
    assert parse_kmsg_record(
        "7,160,424069,-;pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)\n"
        " SUBSYSTEM=acpi\n DEVICE=+acpi:PNP0A03:00\n"
    ) == (7, 0.424069, "pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)")
    assert parse_kmsg_record("6,339,5140900,-;NET: Registered protocol family 10\n") == (
        6,
        5.1409,
        "NET: Registered protocol family 10",
    )
    assert parse_kmsg_record("30,340,5690716,-;udevd[80]: starting version 181\n") == (
        6,
        5.690716,
        "udevd[80]: starting version 181",
    )


@pytest.mark.parametrize(
    "raw",
    [
        " SUBSYSTEM=acpi",
        " DEVICE=+acpi:PNP0A08:00\n",
        "",
        "garbage",
        ";",
        "6,1;x",
        "a,b,c,-;x",
        "[ 4274.089861] fovo.local kernel: ACPI: EC: interrupt blocked",
    ],
)
def test_non_records_come_back_whole(raw: str) -> None:
    assert parse_kmsg_record(raw) == (None, None, raw)


def test_extra_header_fields_are_ignored() -> None:
    """The ABI reserves more comma-separated fields before ';' ("should be gracefully ignored")."""
    assert parse_kmsg_record("4,1227,5000000,c,1,-;NVRM: x") == (4, 5.0, "NVRM: x")


@given(st.text(max_size=400))
def test_parsers_never_raise(text: str) -> None:
    level, seconds, message = parse_kmsg_record(text)
    assert level is None or 0 <= level <= 7
    assert seconds is None or seconds >= 0
    assert isinstance(message, str)
    event = classify_kernel_line(text)
    assert event is None or event.kind in ("xid", "nv_err_no_memory", "oom_kill")


# --- KernelLogFollower on real files, FIFOs and a child process -------------------------------


def kmsg(seq: int, usec: int, message: str, level: int = 4) -> bytes:
    """A /dev/kmsg record around a real message (framing reconstructed from the ABI doc)."""
    return f"{level},{seq},{usec},-;{message}\n".encode()


def test_follower_reads_only_new_records_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    path.write_bytes(kmsg(1, 1_000_000, XID[0]))  # old: before start(), must be skipped
    follower = KernelLogFollower(kmsg_path=str(path), journalctl=str(tmp_path / "none"))
    try:
        assert follower.start() == "kmsg"
        assert follower.poll() == []
        with path.open("ab") as out:
            out.write((FIXTURES / "kmsg_records.txt").read_bytes())
            out.write(kmsg(500, 4_600_101_234, XID[4]))
            out.write(kmsg(501, 4_601_000_567, NO_MEMORY[0]))
            out.write(kmsg(502, 4_602_250_000, OOM[2][OOM[2].index("Out of memory") :], level=3))
        events = follower.poll()
        assert events == [
            KernelEvent("xid", XID[4], 43, 74059, "train_gpt2_bf16", 4600.101234),
            KernelEvent("nv_err_no_memory", NO_MEMORY[0], monotonic_s=4601.000567),
            KernelEvent(
                "oom_kill", OOM[2][OOM[2].index("Out of memory") :], None, 15784, "python3", 4602.25
            ),
        ]
        assert follower.poll() == []
    finally:
        follower.close()
    follower.close()  # idempotent


def test_follower_on_a_fifo_never_blocks_and_joins_split_records(tmp_path: Path) -> None:
    path = tmp_path / "kmsg.fifo"
    os.mkfifo(path)
    follower = KernelLogFollower(kmsg_path=str(path), journalctl=str(tmp_path / "none"))
    try:
        assert follower.start() == "kmsg"
        started = time.monotonic()
        assert follower.poll() == []  # no writer yet
        writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        try:
            assert follower.poll() == []  # a writer, no data
            record = kmsg(7, 2_500_000, strip_log_prefix(XID[11]))  # the kernel's message
            os.write(writer, record[:40])
            assert follower.poll() == []  # half a record waits for the rest
            os.write(writer, record[40:])
            assert follower.poll() == [
                KernelEvent("xid", strip_log_prefix(XID[11]), 119, 11431, "gpu-feature-dis", 2.5)
            ]
        finally:
            os.close(writer)
        assert follower.poll() == []  # writer gone: EOF, still no block
        assert time.monotonic() - started < 2
    finally:
        follower.close()


def test_epipe_is_skipped_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """/dev/kmsg returns EPIPE once when records were overwritten, then reads on."""
    replies: list[bytes | BaseException] = [
        BrokenPipeError(),
        kmsg(9, 3_000_000, strip_log_prefix(OOM[4])),
        BlockingIOError(),
    ]

    def fake_read(fd: int, size: int) -> bytes:
        reply = replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    path = tmp_path / "kmsg"
    path.touch()
    follower = KernelLogFollower(kmsg_path=str(path), journalctl=str(tmp_path / "none"))
    try:
        assert follower.start() == "kmsg"
        monkeypatch.setattr(kernel_log.os, "read", fake_read)
        with caplog.at_level(logging.WARNING, logger="agent_supervisor.sense.kernel_log"):
            events = follower.poll()
        assert [(e.kind, e.pid, e.monotonic_s) for e in events] == [("oom_kill", 140339, 3.0)]
        assert "EPIPE" in caplog.text
        assert follower.source == "kmsg"
    finally:
        monkeypatch.undo()
        follower.close()


def fake_journalctl(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "journalctl"
    script.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def poll_until(follower: KernelLogFollower, count: int) -> list[KernelEvent]:
    events: list[KernelEvent] = []
    deadline = time.monotonic() + 10
    while len(events) < count and time.monotonic() < deadline:
        started = time.monotonic()
        events += follower.poll()
        assert time.monotonic() - started < 1, "poll() blocked"
        time.sleep(0.02)
    return events


def test_falls_back_to_journalctl(tmp_path: Path) -> None:
    """journalctl -k -o json: only entries with _TRANSPORT=kernel and SYSLOG_FACILITY=0
    count (entries 2 and 4 of the fixture are a user's fake Xid); stamps from
    _SOURCE_MONOTONIC_TIMESTAMP."""
    recorded = FIXTURES / "journalctl_k_json.txt"
    script = fake_journalctl(tmp_path, f'cat "{recorded}"\nexec sleep 60')
    follower = KernelLogFollower(kmsg_path=str(tmp_path / "missing"), journalctl=str(script))
    named_like_xid = (
        "Memory cgroup out of memory: Killed process 7829 (Xid (PCI:0): 79) "
        "total-vm:82312kB, anon-rss:65280kB, file-rss:6800kB, shmem-rss:0kB, "
        "UID:0 pgtables:200kB oom_score_adj:0"
    )
    try:
        assert follower.start() == "journalctl"
        events = poll_until(follower, 4)
        assert events == [
            KernelEvent("xid", XID[4], 43, 74059, "train_gpt2_bf16", 4600.101234),
            KernelEvent("nv_err_no_memory", NO_MEMORY[0], monotonic_s=4601.000567),
            KernelEvent(
                "oom_kill", OOM[2][OOM[2].index("Out of memory") :], None, 15784, "python3", 4602.25
            ),
            KernelEvent("oom_kill", named_like_xid, None, 7829, "Xid (PCI:0): 79", 4603.0),
        ]
        assert (tmp_path / "args").read_text().split() == list(kernel_log.JOURNALCTL_ARGS)
        proc = follower._proc
        assert proc is not None and proc.poll() is None  # still following
    finally:
        follower.close()
    assert proc.returncode is not None  # killed and reaped
    follower.close()


def test_journalctl_that_exits_makes_the_source_unavailable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = fake_journalctl(tmp_path, "echo '-- No entries --'\nexit 1")
    follower = KernelLogFollower(kmsg_path=str(tmp_path / "missing"), journalctl=str(script))
    try:
        assert follower.start() == "journalctl"
        deadline = time.monotonic() + 10
        with caplog.at_level(logging.WARNING, logger="agent_supervisor.sense.kernel_log"):
            while follower.source == "journalctl" and time.monotonic() < deadline:
                assert follower.poll() == []
                time.sleep(0.02)
        assert follower.source == "unavailable"
        assert [r.getMessage() for r in caplog.records] == [
            "kernel log: journalctl exited (status 1)"
        ]
        assert follower.poll() == []
    finally:
        follower.close()


def test_nothing_readable_is_unavailable_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    follower = KernelLogFollower(
        kmsg_path=str(tmp_path / "missing"), journalctl=str(tmp_path / "no-journalctl")
    )
    with caplog.at_level(logging.DEBUG, logger="agent_supervisor.sense.kernel_log"):
        assert follower.start() == "unavailable"
        assert follower.poll() == []
        follower.close()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "kernel log unavailable" in warnings[0].getMessage()


def test_a_directory_is_not_a_kernel_log(tmp_path: Path) -> None:
    follower = KernelLogFollower(kmsg_path=str(tmp_path), journalctl=str(tmp_path / "none"))
    try:
        assert follower.start() == "unavailable"
    finally:
        follower.close()


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg not readable here")
def test_real_dev_kmsg_starts_at_the_end_and_does_not_block() -> None:
    follower = KernelLogFollower()
    try:
        assert follower.start() == "kmsg"
        started = time.monotonic()
        events = follower.poll()
        assert time.monotonic() - started < 1
        assert all(isinstance(e, KernelEvent) for e in events)
    finally:
        follower.close()


def test_issue_12_a_gpu_that_fell_off_the_bus_is_an_event_with_or_without_an_xid() -> None:
    gone = lines("gpu_lost.txt")
    for line in (gone[0], gone[1], gone[3]):
        assert classify_kernel_line(line) == KernelEvent(kind="gpu_lost", message=line)
    assert classify_kernel_line(gone[2]) is None  # the banner naming the GPU only


def test_issue_12_xid_154_carries_the_drivers_recovery_action() -> None:
    reset, reboot, none = (classify_kernel_line(x) for x in lines("xid154.txt"))
    assert reset is not None and reboot is not None and none is not None
    assert (reset.code, reset.recovery_action) == (154, "GPU Reset Required")
    assert reboot.recovery_action == "Node Reboot Required"
    assert none.recovery_action == "None"
    assert classify_kernel_line(XID[9]).recovery_action is None  # an Xid 79 has none

"""Follow the kernel log: new /dev/kmsg records (or ``journalctl -k`` entries) classified.

``KernelLogFollower`` is the only I/O; parsing and classifying are pure, in
``agent_supervisor.sense.kernel_lines`` (re-exported here). Only the kernel's own lines count
(issue 34): a kmsg record whose facility is not 0 (written from user space) and a journal
entry whose ``_TRANSPORT`` is not ``kernel`` or whose ``SYSLOG_FACILITY`` is not 0 are
skipped, neither classified nor kept.

- /dev/kmsg records: Linux Documentation/ABI/testing/dev-kmsg (one record per read(), -EAGAIN
  when O_NONBLOCK and empty, -EPIPE when records were overwritten, SEEK_END supported). A
  read() with a buffer smaller than the record fails with EINVAL (seen on this project's dev
  VM); systemd reads 8 KiB + 1 ("the kernel-side limit per record is 8K",
  src/journal/journald-kmsg.c).
- journalctl: ``-o json`` prints one JSON object per entry (journalctl(1)); the fields are
  systemd.journal-fields(7)'s: MESSAGE (a string, or an array of byte values when it is not
  UTF-8), _TRANSPORT ("kernel" for what journald read from /dev/kmsg), SYSLOG_FACILITY (a
  decimal string), _SOURCE_MONOTONIC_TIMESTAMP (the kmsg stamp, microseconds) and
  __MONOTONIC_TIMESTAMP (journald's own, microseconds).
"""

from __future__ import annotations

import dataclasses
import grp
import json
import logging
import os
import re
import stat
import subprocess

from agent_supervisor.sense.kernel_lines import (
    KERNEL_FACILITY,
    KernelEvent,
    classify_kernel_line,
    classify_kernel_message,
    kmsg_facility,
    parse_kmsg_record,
)

__all__ = [
    "KernelEvent",
    "KernelLogFollower",
    "classify_kernel_line",
    "classify_kernel_message",
    "journal_kernel_message",
    "parse_kmsg_record",
]

logger = logging.getLogger(__name__)

#: One /dev/kmsg read returns one record; 16 KiB is twice the kernel's per-record limit.
KMSG_READ_SIZE = 16384
#: Upper bound on reads per poll(), so a flood of records cannot hold the tick forever.
MAX_READS_PER_POLL = 4096
#: A partial line longer than this (no newline seen) is dropped rather than buffered forever.
MAX_PENDING_BYTES = 65536

#: Kernel lines kept raw for replay even when no classifier knows them (yet).
_KEEP = re.compile(r"NVRM|nvidia|Xid|[Oo]ut of memory|oom-kill")
#: At most this many raw lines per poll.
MAX_KEPT_LINES = 200

#: -k adds the match _TRANSPORT=kernel (journalctl(1)); the fields are checked again per entry.
JOURNALCTL_ARGS = (
    "-k",
    "-f",
    "-o",
    "json",
    "--no-pager",
    "-n",
    "0",
    "--output-fields=MESSAGE,SYSLOG_FACILITY,_TRANSPORT,_SOURCE_MONOTONIC_TIMESTAMP",
)


#: What to do when the kernel log cannot be read (issue 34): the unit's grant, named.
UNREADABLE_FIX = (
    "grant the service CAP_SYSLOG (AmbientCapabilities=CAP_SYSLOG and "
    "CapabilityBoundingSet=CAP_SYSLOG, as `supervisor systemd-unit` writes them) or add its "
    "user to the systemd-journal group; until then the Xid, NV_ERR_NO_MEMORY and OOM-kill "
    "guards are blind"
)
#: Groups whose members journald lets read the system journal (the journal files' group and
#: the ACLs of systemd's tmpfiles.d/systemd.conf; journalctl(1) "Hint: ... Users in groups
#: 'adm', 'systemd-journal', 'wheel' can see all messages").
JOURNAL_GROUPS = ("systemd-journal", "adm", "wheel")


def may_read_system_journal() -> bool:
    """Whether this process is root or in one of JOURNAL_GROUPS. Never raises."""
    if os.geteuid() == 0:
        return True
    names = set()
    for gid in {os.getegid(), *os.getgroups()}:
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return bool(names.intersection(JOURNAL_GROUPS))


def _journal_text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", errors="replace")
    return None


def journal_kernel_message(line: str) -> tuple[str, float | None] | None:
    """(MESSAGE, seconds since boot or None) of one ``journalctl -o json`` line, or None when
    the entry is not the kernel's own (``_TRANSPORT`` not "kernel", ``SYSLOG_FACILITY`` not
    "0") or the line is not such an object. Seconds: ``_SOURCE_MONOTONIC_TIMESTAMP`` (the
    kmsg stamp), else ``__MONOTONIC_TIMESTAMP``, microseconds / 1e6. Never raises."""
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if (
        not isinstance(entry, dict)
        or entry.get("_TRANSPORT") != "kernel"
        or entry.get("SYSLOG_FACILITY") != str(KERNEL_FACILITY)
    ):
        return None
    message = _journal_text(entry.get("MESSAGE"))
    if message is None:
        return None
    stamp = entry.get("_SOURCE_MONOTONIC_TIMESTAMP", entry.get("__MONOTONIC_TIMESTAMP"))
    seconds = (
        int(stamp) / 1_000_000
        if isinstance(stamp, str) and stamp.isdigit() and len(stamp) < 20
        else None
    )
    return message, seconds


def _split_lines(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines (without the newline) and the unfinished tail."""
    *lines, tail = data.split(b"\n")
    if len(tail) > MAX_PENDING_BYTES:
        logger.warning("kernel log: dropped a %d-byte line without a newline", len(tail))
        tail = b""
    return lines, tail


class KernelLogFollower:
    """Follow new kernel log lines without ever blocking the caller.

    Lifecycle: start() once (opens a source), poll() every tick, close() at the end.
    Sources, in order of preference:
      "kmsg": ``kmsg_path`` opened O_RDONLY|O_NONBLOCK, positioned with lseek(SEEK_END) so only
        records written after start() are read (a FIFO cannot seek; it is read from where it is).
      "journalctl": ``journalctl -k -f -o short-monotonic --no-pager -n 0`` as a child process
        with a non-blocking stdout pipe, when kmsg cannot be opened (EPERM under
        kernel.dmesg_restrict, missing in a container). Its stamps are journald's and may
        disagree with kmsg's (systemd issues #22554, #34250).
      "unavailable": neither worked; one WARNING naming the fix (``UNREADABLE_FIX``) is logged,
        kept in ``warning``, and poll() returns []. Falling back to journalctl as a user who
        may not read the system journal logs that warning too (journalctl -k then shows it
        nothing).
    """

    def __init__(self, kmsg_path: str = "/dev/kmsg", journalctl: str = "journalctl") -> None:
        self._kmsg_path = kmsg_path
        self._journalctl = journalctl
        self._fd: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending = b""
        self.source = "unavailable"
        self.warning: str | None = None
        """Why the kernel log cannot be (fully) read, with the fix, set by start() (None:
        it can); the service records it as a ``kernel_log_unreadable`` incident."""
        self.last_lines: list[str] = []
        """The NVIDIA and OOM lines of the last poll, classified or not (message text):
        kept with the Sample so replay re-classifies them with a newer classifier."""

    def start(self) -> str:
        """Open the best available source; returns "kmsg" | "journalctl" | "unavailable".

        Does not block beyond open() and fork/exec. Calling it again returns the current source.
        """
        if self._fd is not None or self._proc is not None:
            return self.source
        kmsg_error = self._open_kmsg()
        if self._fd is not None:
            self.source = "kmsg"
        else:
            journal_error = self._spawn_journalctl()
            if self._proc is not None:
                self.source = "journalctl"
                if not may_read_system_journal():
                    self.warning = (
                        f"kernel log: cannot read {self._kmsg_path} ({kmsg_error}) "
                        f"and this user cannot read the system journal, so "
                        f"journalctl -k shows it no kernel lines; {UNREADABLE_FIX}"
                    )
                    logger.warning("%s", self.warning)
            else:
                self.warning = (
                    f"kernel log unavailable: cannot read {self._kmsg_path} "
                    f"({kmsg_error}) and cannot run {self._journalctl} "
                    f"({journal_error}); {UNREADABLE_FIX}"
                )
                logger.warning("%s", self.warning)
                return self.source
        logger.info("kernel log: following %s", self.source)
        return self.source

    def _open_kmsg(self) -> OSError | None:
        try:
            fd = os.open(self._kmsg_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            return exc
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(self._kmsg_path)
            if not stat.S_ISFIFO(mode):
                os.lseek(fd, 0, os.SEEK_END)
        except OSError as exc:
            os.close(fd)
            return exc
        self._fd = fd
        return None

    def _spawn_journalctl(self) -> OSError | None:
        try:
            proc = subprocess.Popen(
                [self._journalctl, *JOURNALCTL_ARGS],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError as exc:
            return exc
        assert proc.stdout is not None  # stdout=PIPE always gives a pipe
        os.set_blocking(proc.stdout.fileno(), False)
        self._proc = proc
        return None

    def poll(self) -> list[KernelEvent]:
        """Read everything available now and return the classified events, oldest first.

        Never blocks and never raises: at most MAX_READS_PER_POLL reads, EAGAIN ends them, EPIPE
        (kmsg records overwritten before we read them) is logged and skipped, any other read
        error or journalctl exiting logs one warning and makes the source "unavailable"."""
        self.last_lines = []
        if self._fd is not None:
            lines = self._read(self._fd, kmsg=True)
        elif self._proc is not None and self._proc.stdout is not None:
            lines = self._read(self._proc.stdout.fileno(), kmsg=False)
        else:
            return []
        events = []
        for line in lines:
            found = self._message(line.decode("utf-8", errors="replace"))
            if found is None:
                continue
            message, seconds = found
            event = classify_kernel_message(message)
            if event is not None:
                events.append(dataclasses.replace(event, monotonic_s=seconds))
            if (event is not None or _KEEP.search(message)) and len(
                self.last_lines
            ) < MAX_KEPT_LINES:
                self.last_lines.append(message)
        return events

    def _read(self, fd: int, *, kmsg: bool) -> list[bytes]:
        chunks = [self._pending]
        for _ in range(MAX_READS_PER_POLL):
            try:
                data = os.read(fd, KMSG_READ_SIZE)
            except BlockingIOError:
                break
            except BrokenPipeError:
                logger.warning("kernel log: records were overwritten before being read (EPIPE)")
                continue
            except OSError as exc:
                logger.warning("kernel log: reading %s failed (%s); giving up", self.source, exc)
                self.close()
                break
            if not data:
                proc = self._proc
                if not kmsg and proc is not None and proc.poll() is not None:
                    logger.warning("kernel log: journalctl exited (status %s)", proc.returncode)
                    self.close()
                break
            chunks.append(data)
        lines, pending = _split_lines(b"".join(chunks))
        self._pending = pending if self.source != "unavailable" else b""
        return lines

    def _message(self, line: str) -> tuple[str, float | None] | None:
        """(message, seconds) of one kernel line of the source, None for a continuation
        line, a line that is not a record and every line the kernel did not write."""
        if self._fd is None:
            return journal_kernel_message(line)
        if line.startswith(" ") or kmsg_facility(line) != KERNEL_FACILITY:
            return None  # " SUBSYSTEM=..." continuation, or written from user space
        _, seconds, message = parse_kmsg_record(line)
        return message, seconds

    def close(self) -> None:
        """Close the source; kill and reap journalctl. Safe to call more than once."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                logger.warning("kernel log: journalctl pid %s did not exit after SIGKILL", proc.pid)
            if proc.stdout is not None:
                proc.stdout.close()
        self._pending = b""
        self.source = "unavailable"

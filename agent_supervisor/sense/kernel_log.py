"""Follow the kernel log and classify what matters: NVIDIA Xid, NV_ERR_NO_MEMORY, OOM kills.

Parsing is pure (``parse_kmsg_record``, ``classify_kernel_line``); ``KernelLogFollower`` is the
only I/O. Sources of every format, checked against recorded lines in tests/fixtures/kernel/:

- /dev/kmsg records: Linux Documentation/ABI/testing/dev-kmsg ("PRI,SEQ,USEC,FLAGS;text\\n",
  continuation lines start with ' ', one record per read(), -EAGAIN when O_NONBLOCK and empty,
  -EPIPE when records were overwritten, SEEK_END supported). A read() with a buffer smaller
  than the record fails with EINVAL (seen on this project's dev VM); systemd reads 8 KiB + 1
  ("the kernel-side limit per record is 8K", src/journal/journald-kmsg.c).
- Xid: NVIDIA open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c
  (``krcReportXid_IMPL``): "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s", pid
  "'<unknown>'" and name "<unknown>" when no channel is known; MIG adds " GPU-I:.. GPU-CI:.."
  inside the parentheses. Newer drivers omit pid/name when unknown and print
  "channel 0x%08x" instead of "Ch %08x" (GB10 form, PCI domain 000f: ulmentflam/llm.mojo
  docs/ai/gpt2_124m_fineweb_training_run.md). The name is the task comm, cut to 15 characters
  ("VLLM::EngineCor", "cuda_plot_k32_v").
- NV_ERR_NO_MEMORY: "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]
  (0x00000051) returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359", the GB10
  unified-memory exhaustion signature that precedes host freezes (NVIDIA/open-gpu-kernel-modules
  #1358, NVIDIA/dgx-spark-playbooks #97, vllm-project/vllm #54200, #56824). Not every such line
  ends in a failure (vllm #56824 saw them on healthy starts); the guards weigh it, not this module.
- GPU lost: "NVRM: The NVIDIA GPU 0000:b3:00.0 / NVRM: (PCI ID: 10de:26b5) installed in this system
  has / NVRM: fallen off the bus and is not responding to commands." is one message printed as
  three lines with no Xid number (NVIDIA/NVSentinel #155, leptonai/gpud PR #1209); the Xid form
  "Xid (PCI:...): 79, GPU has fallen off the bus." is followed by "nvCheckOkFailedNoLog: Check
  failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST]" (NVIDIA/open-gpu-kernel-modules #1151).
  The line carrying "fallen off the bus" (or NV_ERR_GPU_IS_LOST) is the event: kind "gpu_lost".
- Xid 154 "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)": the
  driver's own verdict; ``recovery_action`` holds the text in the last parentheses, as NVIDIA
  NVSentinel's syslog-health-monitor reads it (pkg/xid/parser/csv.go).
- OOM killer: Linux mm/oom_kill.c, "%s: Killed process %d (%s) total-vm:..." (message "Out of
  memory" or "Memory cgroup out of memory") and the summary "oom-kill:constraint=...,task=%s,
  pid=%d,uid=%d". One kill prints both lines, so it yields two events with the same pid.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import stat
import subprocess
from dataclasses import dataclass

__all__ = ["KernelEvent", "KernelLogFollower", "classify_kernel_line", "parse_kmsg_record"]

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

JOURNALCTL_ARGS = ("-k", "-f", "-o", "short-monotonic", "--no-pager", "-n", "0")


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """One classified kernel log line.

    kind: "xid" | "nv_err_no_memory" | "oom_kill" | "gpu_lost".
    message: the kernel message text as read (without the /dev/kmsg prefix; kmsg's "\\xNN"
      escapes are kept, not decoded).
    code: the Xid number for kind "xid", else None.
    pid, process: the process the line names (Xid "pid=", OOM victim), None when not printed
      or printed as "<unknown>". process is the kernel's comm, at most 15 characters.
    monotonic_s: seconds since boot as the record carries it (the kmsg "monotonic timestamp",
      taken by printk from local_clock(): close to CLOCK_MONOTONIC, not guaranteed equal), or
      journalctl's short-monotonic stamp; None when the line had neither.
    """

    kind: str
    message: str
    code: int | None = None
    pid: int | None = None
    process: str | None = None
    monotonic_s: float | None = None
    recovery_action: str | None = None
    """For Xid 154: the new recovery action as printed ("Node Reboot Required",
    "GPU Reset Required", "Drain and Reset", "None")."""


_KMSG_HEADER = re.compile(r"(?P<pri>\d{1,4}),(?P<seq>\d{1,20}),(?P<usec>\d{1,20})(?:,[^;\n]*)?")


def parse_kmsg_record(raw: str) -> tuple[int | None, float | None, str]:
    """Split one /dev/kmsg record "PRI,SEQ,USEC,FLAGS[,...];message\\n[ KEY=value\\n...]".

    Returns: (syslog level 0-7 = PRI & 7, timestamp in seconds = USEC / 1e6, message text up
    to the first newline). Continuation lines (" SUBSYSTEM=...") are dropped. Anything that is
    not a record (a lone continuation line, a journal line, garbage) gives (None, None, raw).
    Never raises. Source: Documentation/ABI/testing/dev-kmsg.
    """
    head, sep, rest = raw.partition(";")
    match = _KMSG_HEADER.fullmatch(head) if sep else None
    if match is None:
        return None, None, raw
    message = rest.split("\n", 1)[0]
    return int(match["pri"]) & 7, int(match["usec"]) / 1_000_000, message


_XID = re.compile(r"(?<![A-Za-z])Xid \(PCI:[^)]*\): (?P<code>\d{1,6})(?!\d)(?P<rest>.*)")
_XID_PID = re.compile(r", pid=(?:(?P<pid>\d{1,10})(?!\d))?")
_XID_NAME = re.compile(r", pid=[^,]*, name=(?P<name>.*?)(?:, |$)")
_GPU_LOST = re.compile(r"fallen off the bus|\bNV_ERR_GPU_IS_LOST\b|GPU lost from the bus")
_RECOVERY = re.compile(r"recovery action changed from .*\((?P<action>[^()]*)\)\s*\.?\s*$")
_NO_MEMORY = re.compile(r"\bNV_ERR_NO_MEMORY\b|_memdescAllocInternal\b")
_OOM_KILLED = re.compile(
    r"[Oo]ut of memory(?: \([^)]*\))?: Kill(?:ed)? process (?P<pid>\d{1,10}) "
    r"\((?P<name>.*?)\)(?= total-vm| score|,|$)"
)
_OOM_SUMMARY = re.compile(r"\boom-kill:constraint=.*,task=(?P<name>.*),pid=(?P<pid>\d{1,10}),uid=")


def _known(name: str | None) -> str | None:
    return None if name is None or name in ("", "<unknown>") else name


def classify_kernel_line(message: str) -> KernelEvent | None:
    """Return the event a kernel message reports, or None for the lines that do not matter.

    Accepts the bare message or a line with a dmesg/syslog/journal prefix in front (matching
    searches, it does not anchor). ``monotonic_s`` is left None; the follower fills it in.
    Never raises.
    """
    xid = _XID.search(message)
    if xid is not None:
        rest = xid["rest"]
        pid = _XID_PID.match(rest)
        name = _XID_NAME.match(rest)
        recovery = _RECOVERY.search(rest)
        return KernelEvent(
            kind="xid",
            message=message,
            code=int(xid["code"]),
            pid=int(pid["pid"]) if pid is not None and pid["pid"] is not None else None,
            process=_known(name["name"]) if name is not None else None,
            recovery_action=recovery["action"].strip() if recovery is not None else None,
        )
    if _GPU_LOST.search(message) is not None:
        return KernelEvent(kind="gpu_lost", message=message)
    if _NO_MEMORY.search(message) is not None:
        return KernelEvent(kind="nv_err_no_memory", message=message)
    oom = _OOM_KILLED.search(message) or _OOM_SUMMARY.search(message)
    if oom is not None:
        return KernelEvent(
            kind="oom_kill", message=message, pid=int(oom["pid"]), process=_known(oom["name"])
        )
    return None


_JOURNAL_LINE = re.compile(r"\[\s*(?P<ts>\d{1,12}\.\d{1,9})\]\s+\S+\s+(?P<rest>.*)")


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
      "unavailable": neither worked; one WARNING is logged and poll() returns [].
    """

    def __init__(self, kmsg_path: str = "/dev/kmsg", journalctl: str = "journalctl") -> None:
        self._kmsg_path = kmsg_path
        self._journalctl = journalctl
        self._fd: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending = b""
        self.source = "unavailable"
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
            else:
                logger.warning(
                    "kernel log unavailable: cannot read %s (%s) and cannot run %s (%s)",
                    self._kmsg_path, kmsg_error, self._journalctl, journal_error,
                )
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
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
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
            text = line.decode("utf-8", errors="replace")
            event = self._event(text)
            if event is not None:
                events.append(event)
            if (event is not None or _KEEP.search(text)) and \
                    len(self.last_lines) < MAX_KEPT_LINES:
                self.last_lines.append(parse_kmsg_record(text)[2])
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

    def _event(self, line: str) -> KernelEvent | None:
        if line.startswith(" "):  # a kmsg continuation line (" SUBSYSTEM=...")
            return None
        _, seconds, message = parse_kmsg_record(line)
        if seconds is None:
            journal = _JOURNAL_LINE.match(line)
            if journal is not None:
                seconds = float(journal["ts"])
                message = journal["rest"].removeprefix("kernel: ")
        event = classify_kernel_line(message)
        if event is None or seconds is None:
            return event
        return dataclasses.replace(event, monotonic_s=seconds)

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

"""Kernel log lines, parsed and classified: NVIDIA Xid, NV_ERR_NO_MEMORY, GPU lost, OOM kills. Pure.

Sources of every format, checked against recorded lines in tests/fixtures/kernel/:

- /dev/kmsg records: Linux Documentation/ABI/testing/dev-kmsg ("PRI,SEQ,USEC,FLAGS;text\\n",
  continuation lines start with ' '). PRI is the syslog "facility << 3 | level"; the kernel's
  own lines have facility 0 (LOG_KERN). A line written into /dev/kmsg from user space never
  has facility 0: kernel/printk/printk.c ``devkmsg_write`` sets LOG_USER when the writer gives
  no facility or facility 0, "to be able to reliably distinguish kernel-generated messages
  from userspace-injected ones" (checked on this project's VM, Linux 6.18: writing
  "<0>text" to /dev/kmsg as root gives the record "8,...;text").
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

Matched only where the kernel writes them (issue 34): every pattern is anchored at the start
of the message, because a task's comm is printed inside other kernel lines ("Killed process
1234 (Xid (PCI:0): 79)", "Xid (PCI:0): 79 invoked oom-killer", recorded from a real OOM kill in
tests/fixtures/kernel/oom_kill_named_like_xid.txt). A comm is at most 15 characters, shorter
than any anchored pattern ("NVRM: Xid (PCI:" alone is 15), so no comm can start a match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "KERNEL_FACILITY",
    "KernelEvent",
    "classify_kernel_line",
    "classify_kernel_message",
    "kmsg_facility",
    "parse_kmsg_record",
    "strip_log_prefix",
]

#: syslog facility of the kernel's own lines (LOG_KERN, syslog(3)).
KERNEL_FACILITY = 0


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
      journald's _SOURCE_MONOTONIC_TIMESTAMP; None when the line had neither.
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


def kmsg_facility(raw: str) -> int | None:
    """The syslog facility of a /dev/kmsg record (PRI >> 3; 0 = the kernel), None when
    ``raw`` is not a record. Never raises."""
    head, sep, _ = raw.partition(";")
    match = _KMSG_HEADER.fullmatch(head) if sep else None
    return None if match is None else int(match["pri"]) >> 3


_XID = re.compile(r"NVRM: Xid \(PCI:[^)]*\): (?P<code>\d{1,6})(?!\d)(?P<rest>.*)")
_XID_PID = re.compile(r", pid=(?:(?P<pid>\d{1,10})(?!\d))?")
_XID_NAME = re.compile(r", pid=[^,]*, name=(?P<name>.*?)(?:, |$)")
_GPU_LOST = re.compile(
    r"NVRM: .*?(?:fallen off the bus|\bNV_ERR_GPU_IS_LOST\b|"
    r"GPU lost from the bus)"
)
_RECOVERY = re.compile(r"recovery action changed from .*\((?P<action>[^()]*)\)\s*\.?\s*$")
# "nvCheckOkFailedNoLog:" is only ever printed by NVRM; one report quotes it without "NVRM: ".
_NO_MEMORY = re.compile(r"(?:NVRM: |nvCheckOkFailedNoLog: ).*?\bNV_ERR_NO_MEMORY\b")
_OOM_KILLED = re.compile(
    r"(?:Memory cgroup )?[Oo]ut of memory(?: \([^)]*\))?: Kill(?:ed)? process "
    r"(?P<pid>\d{1,10}) \((?P<name>.*?)\)(?= total-vm| score|,|$)"
)
# Greedy task=: a comm holding ",pid=1,uid=" cannot stand in for the kernel's own pid.
_OOM_SUMMARY = re.compile(r"oom-kill:constraint=.*,task=(?P<name>.*),pid=(?P<pid>\d{1,10}),uid=")

#: What a report, dmesg, syslog or journalctl puts in front of a kernel message: a continuation
#: indent, a dmesg stamp "[ 1234.5678]", dmesg --ctime "[Sun Mar 30 08:24:00 2025]", a syslog
#: date "May 15 23:09:30", a time "19:15:34", "host kernel: ", Talos "host: kern: warning: [..]: ".
_PREFIX = re.compile(
    r"\s+|\[\s*\d{1,12}\.\d{1,9}\]\s*"
    r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d \d{4}\]\s*"
    r"|[A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d\s+|\d\d:\d\d:\d\d\s+"
    r"|(?:\S+ )?kernel: |\S+: kern:\s+\w+: \[[^\]]*\]: "
)
_MAX_PREFIXES = 8


def _known(name: str | None) -> str | None:
    return None if name is None or name in ("", "<unknown>") else name


def strip_log_prefix(line: str) -> str:
    """``line`` without the dmesg/syslog/journal/Talos framing in front of the kernel message
    (at most ``_MAX_PREFIXES`` pieces, see ``_PREFIX``). Never raises."""
    pos = 0
    for _ in range(_MAX_PREFIXES):
        match = _PREFIX.match(line, pos)
        if match is None or match.end() == pos:
            break
        pos = match.end()
    return line[pos:]


def classify_kernel_message(message: str) -> KernelEvent | None:
    """The event a bare kernel message reports (the text after kmsg's ``;`` or journald's
    MESSAGE), or None. Every pattern must match at the start of ``message``. Never raises."""
    xid = _XID.match(message)
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
    if _GPU_LOST.match(message) is not None:
        return KernelEvent(kind="gpu_lost", message=message)
    if _NO_MEMORY.match(message) is not None:
        return KernelEvent(kind="nv_err_no_memory", message=message)
    oom = _OOM_KILLED.match(message) or _OOM_SUMMARY.match(message)
    if oom is not None:
        return KernelEvent(
            kind="oom_kill", message=message, pid=int(oom["pid"]), process=_known(oom["name"])
        )
    return None


def classify_kernel_line(line: str) -> KernelEvent | None:
    """The event of a recorded or pasted kernel line (a trace's kernel lines, a report's
    dmesg/syslog/journal output): ``classify_kernel_message`` after ``strip_log_prefix``.
    ``message`` of the event is ``line`` as given; ``monotonic_s`` is left None. Never raises.
    """
    event = classify_kernel_message(strip_log_prefix(line))
    if event is None:
        return None
    return KernelEvent(
        event.kind, line, event.code, event.pid, event.process, None, event.recovery_action
    )

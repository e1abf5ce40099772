"""Re-classify the raw lines a Sample carries with today's classifiers. Pure.

A trace keeps each tick's engine log lines and kernel lines (``Sample.engine_log_lines``,
``Sample.kernel_lines``), so ``supervisor replay`` can judge a trace recorded with an older
classifier by the current one: tags and kernel events are rebuilt from the lines; a
sample without lines keeps the tags it was recorded with.
"""

from __future__ import annotations

import dataclasses

from agent_supervisor.sense.engine_log import classify_engine_line
from agent_supervisor.sense.kernel_log import KernelEvent, classify_kernel_line
from agent_supervisor.telemetry.sample import Sample

__all__ = ["engine_tags", "kernel_event_tag", "kernel_tags", "reclassify"]


def kernel_event_tag(event: KernelEvent) -> str:
    """The Sample's compact form of a kernel event: ``xid:31``, ``oom_kill:1234``,
    ``xid:154:node_reboot_required``, ``gpu_lost``, ``nv_err_no_memory``."""
    if event.kind == "xid" and event.code is not None:
        if event.recovery_action:
            return f"xid:{event.code}:" + "_".join(event.recovery_action.lower().split())
        return f"xid:{event.code}"
    if event.kind == "oom_kill" and event.pid is not None:
        return f"oom_kill:{event.pid}"
    return event.kind


def engine_tags(lines: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Every tag of ``lines``, each once, in order of appearance."""
    return tuple(dict.fromkeys(t for line in lines for t in classify_engine_line(line)))


def kernel_tags(lines: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The kernel events of ``lines`` (one OOM kill's two lines give one event)."""
    events = (classify_kernel_line(line) for line in lines)
    return tuple(dict.fromkeys(kernel_event_tag(e) for e in events if e is not None))


def reclassify(sample: Sample) -> Sample:
    """``sample`` with tags and kernel events rebuilt from its raw lines, where it has any."""
    changes: dict[str, object] = {}
    if sample.engine_log_lines:
        changes["engine_log_tags"] = engine_tags(sample.engine_log_lines)
    if sample.kernel_lines:
        changes["kernel_events"] = kernel_tags(sample.kernel_lines)
    return dataclasses.replace(sample, **changes) if changes else sample

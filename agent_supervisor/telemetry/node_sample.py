"""``NodeSample``: one node of an engine across boxes, as the head last heard of it.

The head's Sample carries one per worker node (``Sample.nodes``). The values come from the
node's ``supervisor agent`` (its own MemAvailable, PSI, kernel events, its local rank);
the head adds how old the last answer is (``age_seconds``) and how far the node's clock is
from its own (``clock_skew_seconds``). Every value may be None ("unknown"), never 0.

Freshness (``freshness``): a node whose last answer is younger than
``distributed.unknown_after_seconds`` is *fresh*; older, its values are *unknown* (no
verdict on them); past ``distributed.stale_after_seconds`` it is *stale*, and that silence
is itself the finding (the worker host froze), with the last values as evidence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["Freshness", "NodeSample", "freshness"]


class Freshness(StrEnum):
    """How much the head may believe a node's last values (see the module docstring)."""

    FRESH = "fresh"
    UNKNOWN = "unknown"
    STALE = "stale"
    NEVER = "never"
    """The agent has not answered once since the head started."""


@dataclass(frozen=True, slots=True)
class NodeSample:
    """One worker node's last answer, with the head's view of its age.

    Units as in ``Sample``; ``rank_*`` describe the node's headless engine rank as its
    agent runs it (``rank_state``: ``running``, ``stopped``, ``exited``, ``killed``;
    ``rank_killed_reason``: ``memory_floor`` when the agent killed it on its own).
    """

    name: str
    address: str | None = None
    age_seconds: float | None = None
    """Head-monotonic seconds since the last answer arrived; None: never answered."""
    clock_skew_seconds: float | None = None
    """The node's UTC clock minus the head's at the middle of the request."""
    error: str | None = None
    """Why the last poll failed, if it did (timeout, refused, 401)."""
    wall_s: float | None = None
    """The node's UTC epoch seconds when it took the sample."""
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    psi_memory_some_avg10_ratio: float | None = None
    psi_memory_full_avg10_ratio: float | None = None
    kernel_events: tuple[str, ...] | None = None
    """Kernel events the agent classified in its recent window (``xid:79``,
    ``nv_err_no_memory``, ``oom_kill:<pid>``); None when it cannot read the kernel log."""
    gpu_temperature_c: float | None = None
    gpu_power_w: float | None = None
    gpu_xid_events: tuple[int, ...] | None = None
    rank_state: str | None = None
    rank_run_id: str | None = None
    """The head's engine run the rank was started for."""
    rank_pid: int | None = None
    rank_exit_code: int | None = None
    rank_exit_signal: int | None = None
    rank_killed_reason: str | None = None
    rank_kill_evidence: dict[str, Any] | None = None
    """What the agent saw when it killed the rank itself (MemAvailable readings, floor)."""
    rank_rss_bytes: int | None = None
    rank_leftover_pids: tuple[int, ...] | None = None
    """Processes of the rank's group alive after it was stopped (() none; None unknown)."""
    mem_available_before_launch_bytes: int | None = None
    rank_log_tags: tuple[str, ...] = ()
    """Signature tags of the rank's recent log lines (``agent_supervisor.sense.engine_log``)."""
    gid_index: int | None = None
    """``NCCL_IB_GID_INDEX`` the agent resolved for the rank's last start (None: left to
    NCCL, or nothing matched: ``gid_note`` says which)."""
    gid_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping of every field."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeSample:
        """Inverse of ``to_dict`` (lists become tuples). Unknown keys raise TypeError."""
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in data.items()}
        return cls(**values)


def freshness(node: NodeSample, *, unknown_after_s: float, stale_after_s: float) -> Freshness:
    """Fresh, unknown, stale or never (thresholds in seconds, from ``engine.distributed``)."""
    if node.age_seconds is None:
        return Freshness.NEVER
    if node.age_seconds >= stale_after_s:
        return Freshness.STALE
    if node.age_seconds >= unknown_after_s:
        return Freshness.UNKNOWN
    return Freshness.FRESH

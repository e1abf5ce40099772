"""What the executor and start-up report: an ``Incident`` and, with a rung change, a
``Transition`` (the value types that cross act -> record -> show).

Frozen dataclasses with UTC-aware datetimes; the store masks secrets in them
(``agent_supervisor.privacy``) before it writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["Incident", "Transition"]


@dataclass(frozen=True)
class Incident:
    """One incident as the executor reports it (the value type that reaches the store).

    ``findings``: the guards' findings as dicts (``Finding.to_dict``), worst first.
    ``log_tail``: the last lines of the engine's log at the time, if any (masked with
    ``privacy.mask_text`` before it is stored).
    ``kernel_lines``: the recent kernel log lines the sensors classified (Xid, OOM ...).
    ``ended_at``: when it was over, where known (UTC); None for a moment-like incident.
    ``node``: the node of an engine across boxes it is about (``engine.nodes``); None:
    the worst finding's ``evidence["node"]``, if any.
    """

    kind: str
    severity: str
    started_at: datetime
    action: str
    explanation: str
    mode: str | None = None
    rung: int | None = None
    run_id: str | None = None
    outcome: str | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    log_tail: str | None = None
    kernel_lines: list[str] = field(default_factory=list)
    ended_at: datetime | None = None
    node: str | None = None

    @property
    def node_name(self) -> str | None:
        """``node``, else the node named in the worst finding's evidence."""
        if self.node is not None or not self.findings:
            return self.node
        node = (self.findings[0].get("evidence") or {}).get("node")
        return node if isinstance(node, str) else None


@dataclass(frozen=True)
class Transition:
    """The engine moved from one rung to another. ``actor``: ``guard:<name>``,
    ``schedule``, ``operator`` or ``startup``."""

    at: datetime
    from_mode: str | None
    to_mode: str
    from_rung: int | None
    to_rung: int
    reason: str
    actor: str

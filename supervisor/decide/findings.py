"""What a guard reports: a ``Finding`` with a severity and the evidence behind it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Finding", "Severity"]


class Severity(StrEnum):
    """How hard the service must respond (DESIGN.md, "Guards").

    emergency: kill the engine's process group now, restart one rung down.
    critical: restart; repeated within the window, step down.
    warning: step down gracefully (instant levers first).
    info: record only.
    """

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"
    EMERGENCY = "emergency"

    @property
    def rank(self) -> int:
        """0 (info) to 3 (emergency), for picking the worst finding."""
        return list(Severity).index(self)


@dataclass(frozen=True, slots=True)
class Finding:
    """One guard's verdict on the window.

    ``kind`` is a stable machine name (``engine_exited``, ``start_failed``...), stored as
    the incident kind; ``summary`` is one human line; ``evidence`` holds the values,
    thresholds and durations that support it (JSON-ready).
    """

    guard: str
    kind: str
    severity: Severity
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    """The engine run it is about, when it is about one."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as stored with incidents."""
        return {
            "guard": self.guard, "kind": self.kind, "severity": str(self.severity),
            "summary": self.summary, "evidence": dict(self.evidence), "run_id": self.run_id,
        }

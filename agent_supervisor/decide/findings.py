"""What a guard reports: a ``Finding`` with a severity, the response it calls for, and
the evidence behind it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent_supervisor.telemetry.finite import json_finite

__all__ = ["Finding", "Response", "Severity"]


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


class Response(StrEnum):
    """What a finding asks of the ladder; ``decide()`` turns it into one action."""

    RECORD = "record"
    """Nothing to do but keep it on record."""
    RESTART = "restart"
    """The engine is dead or hung: restart it (counts toward the start limit)."""
    SKIP_SPECULATION = "skip_speculation"
    """A crash that points at speculative decoding: go to the first rung without it."""
    KILL_STEP_DOWN = "kill_step_down"
    """Emergency: SIGKILL the engine's group now and start one rung down."""
    STEP_DOWN = "step_down"
    """Drain and restart one rung down."""
    SHED_FIRST = "shed_first"
    """Lower the gateway's limits first; step down if it persists once shed."""
    SHED_FIRST_FEWER_SEQUENCES = "shed_first_fewer_sequences"
    """Lower the gateway's limits first; if it persists once shed, step down to the
    first rung that runs fewer sequences (``--max-num-seqs``), else one rung."""
    FEWER_SEQUENCES = "fewer_sequences"
    """Step down now to the first rung that runs fewer sequences (``--max-num-seqs``),
    else one rung, without shedding first (a storm the last shed did not cure); shed
    instead while the step is held (cooldown, transitions per hour) or on the last rung."""
    SHED = "shed"
    """Lower the gateway's limits (no restart)."""
    SKIP_SPECULATION_WHEN_CALM = "skip_speculation_when_calm"
    """Speculation does not pay: go to the first rung without it at a calm moment."""
    RETRY_FALLBACK = "retry_fallback"
    """A start failed for a reason a corrected start can fix: retry the same rung with the
    mode's next unused ``startup_fallbacks`` entry for that class (bounded per start)."""
    NO_RETRY = "no_retry"
    """A start failed for a reason no retry fixes (bad argument, missing model): go to a
    rung without the offending flag, else give up."""
    RETRY_ONCE_THEN_HOLD = "retry_once_then_hold"
    """A start failed in a way no rung fixes (corrupt model files, a checkpoint this engine
    cannot load, a driver mismatch, a fabric set up wrong): the same configuration once
    more (a download that finished, a passing read error); the same signature again is
    never launched a third time: give up with the lines and what to fix (issue 29)."""
    MOVE_CACHE = "move_cache"
    """A start failed on a poisoned compile/JIT cache: relaunch once with the cache moved
    aside (never a step down); the same signature again gives up (issue 29)."""
    HOLD_START = "hold_start"
    """Do not start the engine now (memory not back yet, processes of the old group alive)."""
    REBOOT_REQUIRED = "reboot_required"
    """The box is past saving (GPU lost, memory pinned, processes stuck in the driver):
    kill what is left, hold the ladder, alert; no restart loop."""
    CAP_CONTEXT = "cap_context"
    """A hang on a huge prompt: restart into the first rung whose context cap is below the
    prompt tokens in flight (not the same configuration again)."""
    RELAUNCH = "relaunch"
    """Restart the same rung now, gracefully, and not as a crash (a bad launch)."""
    RESTART_WHEN_CALM = "restart_when_calm"
    """A planned restart of the same rung at a calm moment (a restart hands leaked memory
    back)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One guard's verdict on the window.

    ``kind`` is a stable machine name (``engine_exited``, ``memory_floor``...), stored as
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
    response: Response = Response.RECORD
    recommended_action: str | None = None
    """What an operator should do, in NVIDIA NVSentinel's RecommendedAction words
    (``agent_supervisor.decide.recommended``): NONE, RESTART_APP, COMPONENT_RESET, RESTART_BM..."""
    standing: bool = False
    """A standing fact about the engine build or the box, true on every tick while it lasts
    (a series this build never exports): kept on record, but not trouble, so it does not
    keep the ladder from ever being calm (``ladder.advance``)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as stored with incidents: a NaN or infinite value in the
        evidence becomes None (``telemetry.finite``, issue 34)."""
        return {
            "guard": self.guard, "kind": self.kind, "severity": str(self.severity),
            "summary": self.summary, "evidence": json_finite(dict(self.evidence)),
            "run_id": self.run_id,
            "response": str(self.response), "recommended_action": self.recommended_action,
        }

"""API models, kept apart from the tables (STYLE.md section 10)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

__all__ = ["ActionIn", "DecisionOut", "IncidentOut", "LadderRung", "StatusOut", "TransitionOut"]


class LadderRung(BaseModel):
    rung: int
    mode: str
    description: str
    speculative: bool
    current: bool
    barred_until_seconds: float | None = None


class DecisionOut(BaseModel):
    action: str
    rung: int
    mode: str
    explanation: str
    findings: list[dict[str, Any]]


class StatusOut(BaseModel):
    fleet: str
    version: str
    mode: str
    rung: int
    ladder: list[LadderRung]
    engine_state: str
    engine_run_id: str | None
    engine_pid: int | None
    engine_runtime: str = "process"
    """``process`` or ``container`` (``engine.runtime``)."""
    engine_container: str | None = None
    """The engine's container name (``engine.runtime: container``), None for a process."""
    engine_seconds_in_state: float | None
    last_decision: DecisionOut | None
    paused: bool
    pinned: str | None
    requested: str | None
    """A one-shot operator step not taken yet."""
    probation_seconds_left: float | None
    shed: bool
    calm_seconds: float
    calm_needed_seconds: float | None = None
    """Calm a step up waits for (``hysteresis.calm_seconds``); None on the top rung."""
    gateway: dict[str, Any] | None
    limits: dict[str, Any]
    """The current mode's gateway limits (before shedding)."""
    last_decision_seconds_ago: float | None
    uptime_seconds: float
    reboot_required: dict[str, Any] | None = None
    """Set while the ladder holds because the box needs a reboot (issue 12): kind,
    recommended_action (NVIDIA NVSentinel's words), explanation."""
    supervision: str = "act"
    """``act``: decisions are carried out; ``advise``: only recorded as what they would
    have done (issue 31; the ``act`` and ``advise`` levers switch it)."""
    adopt: dict[str, Any] | None = None
    """With ``engine.adopt`` (an engine the supervisor did not start): the selector,
    ``state`` (``waiting for the engine to adopt``, ``adopted``, ``taken over``), why it
    waits, the adopted pid, the log it reads; None: the supervisor launches its own."""


class IncidentOut(BaseModel):
    id: int
    kind: str
    severity: str
    started_at: datetime
    ended_at: datetime | None = None
    mode: str | None
    action: str
    outcome: str | None
    explanation: str
    run_id: str | None
    findings: list[dict[str, Any]] = []
    kernel_lines: list[str] | None = None
    log_tail: str | None = None
    log_tail_probe_lines_hidden: int = 0
    """The supervisor's own probe lines left out of ``log_tail`` (issue 33)."""


class TransitionOut(BaseModel):
    id: int
    at: datetime
    from_mode: str | None
    to_mode: str
    actor: str
    reason: str
    incident_id: int | None


class ActionIn(BaseModel):
    mode: str | None = None
    """For ``pin``: the mode to pin."""

"""``Decision``: what ``decide()`` hands to the executor. Plain data, no behaviour
(``as_held``: a copy of one, for advise mode)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agent_supervisor.decide.findings import Finding

__all__ = ["Action", "Decision", "as_held"]


class Action(StrEnum):
    """The one thing to do this tick."""

    HOLD = "hold"
    """Nothing to do (findings, if any, are recorded)."""
    START = "start"
    """The engine is stopped and a start is due: start it at ``rung``."""
    RESTART = "restart"
    """The engine crashed or hung: clear what is left of it, start again at ``rung``
    after ``delay_seconds``."""
    STEP_DOWN = "step_down"
    """Stop the engine (drain, or clear a crashed one) and start it at the safer ``rung``."""
    KILL_NOW = "kill_now"
    """Emergency: SIGKILL the engine's process group now, then start at ``rung``."""
    PLANNED_RESTART = "planned_restart"
    """Drain and restart the same ``rung``, not for a crash: leaked memory handed back at a
    calm moment (``memory_creep``), a bad launch drawn again (``spec_launch_lottery``).
    Not counted by the start limit, no rung change (no cooldown, no probation)."""
    STEP_UP = "step_up"
    """Calm for long enough: drain and start one rung up, on probation."""
    RELOAD = "reload"
    """The policy was reloaded and the current mode's engine arguments changed: drain and
    restart the engine at ``rung`` with the new arguments."""
    SHED = "shed"
    """Instant lever: lower the gateway's limits (``shed`` True) or restore them (False)."""
    REBOOT_REQUIRED = "reboot_required"
    """The box needs a reboot (GPU lost, memory pinned, a process stuck in the driver):
    kill whatever is left of the engine, hold the ladder and alert; the service stays up
    to show it (dashboard banner, ``supervisor status`` exits 3) until the operator
    resumes or the host is rebooted."""
    GIVE_UP = "give_up"
    """The safest rung keeps failing: stop trying; the service exits 1 (systemd's start
    limit, one level up)."""



@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one ``decide()`` call.

    ``rung`` is the target rung (for HOLD, the current one); ``findings`` are what
    caused it, worst first; ``explanation`` is one human line an operator can read on
    the dashboard without opening a log.
    """

    action: Action
    rung: int
    explanation: str
    findings: tuple[Finding, ...] = ()
    delay_seconds: float = 0.0
    run_id: str | None = None
    """The engine run the decision reacts to, if any."""
    shed: bool | None = None
    """For SHED: True lowers the gateway's limits, False restores them."""
    marks_failing: int | None = None
    """A rung that failed during its probation: not retried before its backoff."""
    operator: bool = False
    """Taken because the operator pinned or stepped the ladder (not a guard)."""
    start_args: tuple[tuple[str, Any], ...] = ()
    """For START and a fallback RESTART: flags that override the mode's arguments for the
    next launch (a start-up fallback: ``(("--enforce-eager", True),)``)."""
    fallback: int | None = None
    """For a RESTART that is a start-up fallback: its index in the mode's fallbacks."""
    box_fault: bool = False
    """For RESTART: the failure was the box's (a spawn out of descriptors, memory or
    processes), not the mode's; the start limit does not count it (issue 17)."""
    probation_from_s: float | None = None
    """The engine of a rung reached by stepping up began serving at this time (monotonic
    s): its probation runs from here (``ladder.begin_probation``; issue 29)."""
    start_signature: str | None = None
    """For a RESTART after a failed start judged by class: its signature (the class), kept
    by the ladder so that the same failure twice is never launched a third time (issue 29)."""
    move_caches: bool = False
    """For a RESTART after a poisoned compile/JIT cache: move the engine's compile caches
    aside before the next start (renamed, not deleted)."""
    top_rung: int | None = None
    """The ladder's new top rung, chosen by the traffic (``decide/top_switch.py``, issue
    32): the highest rung it climbs back to from now on; the decision's own rung is where
    the engine goes now (the new top, or where it is when below both tops)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for traces, the API and incident evidence)."""
        return {
            "action": str(self.action), "rung": self.rung, "explanation": self.explanation,
            "findings": [f.to_dict() for f in self.findings],
            "delay_seconds": self.delay_seconds, "run_id": self.run_id, "shed": self.shed,
            "marks_failing": self.marks_failing, "operator": self.operator,
            "start_args": [list(a) for a in self.start_args], "fallback": self.fallback,
            "box_fault": self.box_fault, "probation_from_s": self.probation_from_s,
            "start_signature": self.start_signature, "move_caches": self.move_caches,
            "top_rung": self.top_rung,
        }


def as_held(decision: Decision) -> Decision:
    """What the ladder advances by for a decision that was only advised (advise mode,
    agent_supervisor/act/advice.py; live and in replay): a HOLD with the same findings
    (their trouble and deferral marks, a probation that began), none of the action's own
    marks (crash count, handled run, backoff, rung, shed, failed start, top rung)."""
    return dataclasses.replace(decision, action=Action.HOLD, start_signature=None,
                               marks_failing=None, shed=None, top_rung=None)

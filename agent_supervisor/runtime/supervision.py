"""``Supervision``: whether the running service acts on its decisions or only advises
(issue 31 item 1; the gate itself is ``act/advice.py``, asked by the executor).

Set at start from ``supervisor run --advise`` or the policy's ``mode``; switched while
running by the ``advise`` / ``act`` levers (admin API, ``supervisor advise|act``) or by
a reloaded policy whose ``mode`` changed, never by a restart. Every switch (and a start
in advise mode) is an incident of kind ``supervision_mode`` (action ``advise`` or
``act``), so the record says when advice began and ended; a switch asks for a decision at
once, so acting begins with the situation as it is (a crashed engine restarted, a hung
one killed and restarted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from agent_supervisor.act.advice import ACT, ADVISE, SupervisionMode
from agent_supervisor.act.incident import Incident
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder

__all__ = ["KIND", "Supervision"]

logger = logging.getLogger(__name__)

#: The incident kind of a switch between act and advise.
KIND = "supervision_mode"


class Supervision:
    """The service's supervision mode. ``advise``: the ``--advise`` flag (None: the
    policy's ``mode``); ``poke()`` asks for a decision at once."""

    def __init__(self, policy: PolicyHolder, ladder: Ladder, recorder: Recorder,
                 advise: bool | None = None, poke: Callable[[], None] = lambda: None) -> None:
        self._policy = policy
        self.ladder = ladder
        self.recorder = recorder
        self._poke = poke
        self.mode: SupervisionMode = policy.current.mode if advise is None else (
            ADVISE if advise else ACT)
        self._why = "supervisor run --advise" if advise else f"policy mode {self.mode}"
        policy.on_swap(lambda old, new: self.policy_changed(old.mode, new.mode))

    @property
    def advising(self) -> bool:
        """Whether decisions are only recorded as advice (``act/advice.py``)."""
        return self.mode == ADVISE

    def started(self) -> None:
        """At start-up: an advising service says so on the record."""
        if self.advising:
            logger.warning("advise mode (%s): decisions are recorded as what they would "
                           "have done; nothing is carried out but the engine's launch (or "
                           "adoption) and the operator's levers",
                           self._why)
            self._record(f"started in advise mode ({self._why}): decisions are recorded, "
                         "not carried out, except the engine's first launch (or adoption) and "
                         "the operator's own levers", "advise")

    def switch(self, mode: str, actor: str = "operator") -> bool:
        """Act or advise from now on (``mode``: ``act`` or ``advise``); recorded and a
        decision asked for at once. Returns whether it changed anything. Raises
        ValueError for another word."""
        if mode not in (ACT, ADVISE):
            raise ValueError(f"unknown supervision mode {mode!r}; act or advise")
        if mode == self.mode:
            return False
        old, self.mode = self.mode, (ACT if mode == ACT else ADVISE)
        logger.warning("supervision: %s -> %s (%s)", old, mode, actor)
        then = "decisions are carried out from the next tick" if mode == ACT else \
            "decisions are recorded as what they would have done, not carried out"
        self._record(f"supervision switched from {old} to {mode} by {actor}: {then}", mode)
        self._poke()
        return True

    def policy_changed(self, old: SupervisionMode, new: SupervisionMode) -> None:
        """A reloaded policy: its ``mode``, if that changed, is switched to."""
        if old != new:
            self.switch(new, "policy reload")

    def _record(self, explanation: str, action: str) -> None:
        policy, rung = self._policy.current, self.ladder.rung
        self.recorder.incident(Incident(
            kind=KIND, severity="info", started_at=datetime.now(UTC), action=action,
            mode=policy.modes[rung].name, rung=rung, explanation=explanation,
            outcome=f"supervision {action}"))

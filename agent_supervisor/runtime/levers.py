"""``Ladder``: the running service's one ``LadderState``, changed only through
``decide/ladder.py`` (the functions replay uses too), operator changes traced."""

from __future__ import annotations

import logging
import time

from agent_supervisor.decide import ladder as ladder_fn
from agent_supervisor.decide.decision import Decision
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.decide.lifecycle import learn_start_budgets
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.record.trace import TraceWriter

__all__ = ["Ladder"]

logger = logging.getLogger(__name__)


class Ladder:
    """Owner of the ladder state. ``state`` is read anywhere; only these methods change
    it. ``trace``: where operator changes are written for replay (None: no trace)."""

    def __init__(self, policy: PolicyHolder, trace: TraceWriter | None = None,
                 now_s: float | None = None) -> None:
        self._policy = policy
        self.trace = trace
        self.state = LadderState.initial(policy.current,
                                         time.monotonic() if now_s is None else now_s)

    @property
    def rung(self) -> int:
        """The current rung."""
        return self.state.rung

    def advance(self, decision: Decision, now_s: float) -> int:
        """Move by ``decision`` (``decide/ladder.advance``); returns the rung it left."""
        from_rung = self.state.rung
        self.state = ladder_fn.advance(self.state, decision, self._policy.current, now_s)
        return from_rung

    def learn_starts(self, starts: list[tuple[str, float]]) -> None:
        """Past successful starts ``(mode, seconds)``, oldest first: the start budget of
        each mode (``decide/lifecycle.learn_start_budgets``, issue 12)."""
        self._starts = list(starts)
        self.started()

    def started(self, mode: str | None = None, seconds: float | None = None) -> None:
        """A start of ``mode`` took ``seconds`` to ready: learned into its budget."""
        starts = getattr(self, "_starts", [])
        if mode is not None and seconds is not None:
            starts.append((mode, seconds))
        self._starts = starts
        factor = self._policy.current.lifecycle.start_budget_factor
        self.state = ladder_fn.with_start_budgets(self.state,
                                                  learn_start_budgets(starts, factor))

    def start_on(self, rung: int, trouble_s: float | None = None) -> None:
        """Start-up's choice of the first rung (``decide/ladder.start_on``)."""
        self.state = ladder_fn.start_on(self.state, rung, trouble_s)

    def operate(self, lever: str, mode: str | None = None) -> LadderState:
        """Pull an operator lever (``decide/ladder.operate``: pin, unpin, step-down,
        step-up, pause, resume, restart); traced. Raises KeyError for an unknown mode, ValueError
        for an unknown lever or a step off the ladder."""
        policy = self._policy.current
        self.state, action, rung = ladder_fn.operate(self.state, policy, lever, mode)
        logger.info("operator: %s%s", action,
                    f" {policy.modes[rung].name}" if rung is not None else "")
        if self.trace is not None:
            self.trace.operator(time.monotonic(), action, rung)
        return self.state

    def apply(self, action: str, rung: int | None, **extra: object) -> None:
        """An operator record (a policy ``reload``): applied as replay applies it, traced."""
        self.state = ladder_fn.apply_operator(self.state, action, rung, **extra)
        if self.trace is not None:
            self.trace.operator(time.monotonic(), action, rung, **extra)

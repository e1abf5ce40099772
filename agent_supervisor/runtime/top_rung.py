"""``TopRung``: the running service's top-rung choice (issue 32), carried from tick to tick.

The choice itself is pure (``decide/top_rung.py``, ``decide/top_switch.py``); this owns
its state between ticks as ``Ladder`` owns the ladder's, and the figures it reads: the
database's calibration and the policy's ``top_rung.figures``, loaded once per policy
(a reload reads them again) off the event loop.
"""

from __future__ import annotations

import asyncio
import logging

from agent_supervisor.decide.decision import Decision
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.decide.top_rung import TopRungChoice, TopRungFigures, TopRungState
from agent_supervisor.decide.top_switch import live_choice, settle, top_figures
from agent_supervisor.errors import StoreError
from agent_supervisor.policy import Policy, PolicyHolder
from agent_supervisor.record.baselines import load_top_rung_figures
from agent_supervisor.record.store import Store
from agent_supervisor.telemetry.window import Window

__all__ = ["TopRung"]

logger = logging.getLogger(__name__)


class TopRung:
    """``choose`` before ``decide()``, ``settle`` with what was carried out, every tick.
    ``store``: where calibration is read (None: the policy's figures only)."""

    def __init__(self, policy: PolicyHolder, store: Store | None = None) -> None:
        self._policy = policy
        self._store = store
        self._figures_of: Policy | None = None
        self._figures: TopRungFigures | None = None
        self.state: TopRungState | None = None
        """The state the next tick starts from (None: the choice has not run yet)."""
        self._pending: tuple[TopRungState, TopRungState, TopRungChoice] | None = None
        self._last_why: str | None = None

    @property
    def figures(self) -> TopRungFigures | None:
        """The figures in use (None: the choice is off or has none)."""
        return self._figures

    async def choose(self, window: Window, ladder: LadderState,
                     now_s: float) -> TopRungChoice | None:
        """This tick's choice, or None when ``top_rung.enabled`` is off or no candidate
        has figures. Reads the database once per policy (a thread; a database that
        refuses: the policy's figures alone, logged)."""
        policy = self._policy.current
        self._pending = None
        if not policy.top_rung.enabled:
            self._figures_of, self._figures = policy, None
            return None
        if self._figures_of is not policy:
            self._figures_of, self._figures = policy, top_figures(
                policy, await self._stored(policy))
            logger.info("top rung chosen by the traffic among %s",
                        sorted(self._figures.tokens_per_second) if self._figures
                        else "no mode with figures: off")
        if self._figures is None:
            return None
        self._pending = live_choice(self.state, window, ladder, policy, self._figures, now_s)
        choice = self._pending[2]
        if choice.action != "hold" and choice.why != self._last_why:
            logger.info("top rung: %s %s: %s", choice.action, choice.target, choice.why)
        self._last_why = choice.why if choice.action != "hold" else None
        return choice

    def settle(self, decision: Decision | None) -> None:
        """What this tick carried out (None: nothing, e.g. an action still running)."""
        if self._pending is None:
            return
        before, after, choice = self._pending
        self._pending = None
        self.state = settle(before, after, choice, decision, self._policy.current)

    async def _stored(self, policy: Policy) -> TopRungFigures | None:
        if self._store is None:
            return None
        try:
            return await asyncio.to_thread(load_top_rung_figures, self._store, policy)
        except StoreError as exc:
            logger.warning("top rung: calibration unreadable (%s): the policy's figures only",
                           exc)
            return None

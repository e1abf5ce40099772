"""``Ticker``: one tick of the service: sample, decide, hand the decision on.

Owns the tick's state: the window it appends to (shared with the readers), the action
being carried out, and the lateness of scheduled ticks. One tick at a time (a lock);
a decision taken while an action still runs is skipped, unless it is KILL_NOW or
REBOOT_REQUIRED, which interrupt the action (seconds matter: a GB10 host can freeze
~5 s after memory runs out).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from agent_supervisor.act.advice import as_held
from agent_supervisor.act.effects import Executor
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.record.store import Store
from agent_supervisor.record.trace import TraceWriter
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.status import LastDecision
from agent_supervisor.runtime.top_rung import TopRung
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.telemetry.baselines import AcceptanceBaselines, Baselines, EngineUpdate
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

__all__ = ["Ticker"]

logger = logging.getLogger(__name__)


class Ticker:
    """The tick. ``stopping()`` says the service is stopping (no new tick starts);
    ``baselines()`` gives the calibrated baselines, ``acceptance()`` the usual acceptance
    by draft position per mode (both loaded at start-up). ``store``: where the top-rung
    choice reads its calibration (``runtime/top_rung.py``; issue 32)."""

    def __init__(self, policy: PolicyHolder, sensors: Sensors, launcher: EngineLauncher,
                 executor: Executor, ladder: Ladder, window: Window, last: LastDecision,
                 trace: TraceWriter | None, *, stopping: Callable[[], bool],
                 baselines: Callable[[], Baselines],
                 acceptance: Callable[[], AcceptanceBaselines] = dict,
                 update: Callable[[], EngineUpdate | None] = lambda: None,
                 observe: Callable[[Decision, int, float], object] | None = None,
                 store: Store | None = None) -> None:
        self._policy = policy
        self.sensors = sensors
        self.launcher = launcher
        self.executor = executor
        self.ladder = ladder
        self.window = window
        self.last = last
        self.trace = trace
        self._stopping = stopping
        self._baselines = baselines
        self._acceptance = acceptance
        self._update = update          # the last good run on another engine version
        self._observe = observe
        """Called with each decision, the rung it was taken in and the time (good runs)."""
        self.top = TopRung(policy, store)
        """The top rung chosen by the traffic (off unless the policy's ``top_rung.enabled``)."""
        self._lock = asyncio.Lock()
        self._action: asyncio.Task[None] | None = None
        self._last_scheduled_s: float | None = None

    async def tick(self, *, reason: str = "schedule") -> Decision | None:
        """Sample, decide, and hand the decision to the executor. Returns the decision,
        or None when a previous action is still being carried out (sampling continues)
        or the service is stopping."""
        if self._stopping():
            return None
        async with self._lock:
            now = time.monotonic()
            sample = await self._sample(now, self._lateness(now, reason))
            self.window.append(sample)
            if self.trace is not None:
                self.trace.sample(sample)
            top = await self.top.choose(self.window, self.ladder.state, now)
            decision = decide(self.window, self.ladder.state, self._policy.current, now,
                              self._baselines(), acceptance=self._acceptance(), top=top,
                              update=self._update())
            # Advisory mode (act/advice.py): a decision only advised moves the ladder as a
            # HOLD would and never interrupts the action in progress.
            advisory = self.executor.advisory(decision)
            if self._action is not None and not self._action.done():
                if advisory or decision.action not in (Action.KILL_NOW,
                                                       Action.REBOOT_REQUIRED):
                    if self.trace is not None:
                        self.trace.skip(now)
                    self.top.settle(None)
                    return None
                logger.warning("emergency during %s: interrupting it", "an action")
                self._action.cancel()
                await asyncio.gather(self._action, return_exceptions=True)
            if self.trace is not None:
                self.trace.decision(now, decision, advisory=advisory)
            self.last.set(decision, now)
            if self._observe is not None:
                self._observe(decision, self.ladder.state.rung, now)
            carried = as_held(decision) if advisory else decision
            self.top.settle(carried)
            from_rung = self.ladder.advance(carried, now)
            self._action = asyncio.get_running_loop().create_task(
                self._carry_out(decision, from_rung, advisory))
            return decision

    @contextlib.asynccontextmanager
    async def quiet(self) -> AsyncIterator[None]:
        """Hold the tick and let the running action finish (shutdown runs inside)."""
        async with self._lock:
            if self._action is not None:
                await asyncio.gather(self._action, return_exceptions=True)
            yield

    def _lateness(self, now: float, reason: str) -> float | None:
        """How late a scheduled tick came (seconds past its interval); None otherwise."""
        if reason != "schedule":
            return None
        last, self._last_scheduled_s = self._last_scheduled_s, now
        if last is None:
            return None
        return max(0.0, now - last - self._policy.current.sampling.tick_seconds)

    async def _carry_out(self, decision: Decision, from_rung: int, advisory: bool) -> None:
        try:
            await self.executor.carry_out(decision, from_rung=from_rung, advisory=advisory)
        except Exception:
            logger.exception("carrying out %s failed", decision.action)

    async def _sample(self, now: float, lateness: float | None) -> Sample:
        # The sensors read the run's new log lines themselves (their ``engine_log``).
        return await self.sensors.sample(now_s=now, status=self.launcher.status(),
                                         window=self.window, lateness_seconds=lateness,
                                         leftovers=self.launcher.leftovers())

"""``GoodRuns``: a past good run's acceptance by position becomes a baseline (issue 13),
with the engine version it ran on and its tokens/s per running request (issue 29: a
run on a later version is compared with it, ``runtime/engine_updates.py``).

After a run of a speculative mode has served for ``guards.speculative.good_run_seconds``
with no finding of warning or worse, and the window holds at least ``lottery_drafts``
drafts of it, its acceptance by position over the window (the same counters and
arithmetic the launch lottery uses) is written once as a ``mode_baselines`` row with
``source`` run. ``load_acceptance`` prefers the newest such rows, so the launch lottery
judges a launch against what this fleet's workload usually gets from this mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import statistics
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Severity
from agent_supervisor.decide.guards.engine_update import busy_rate
from agent_supervisor.decide.guards.speculative import run_acceptance
from agent_supervisor.policy import Policy, PolicyHolder
from agent_supervisor.record.baselines import args_digest, load_acceptance
from agent_supervisor.record.records import AddBaseline
from agent_supervisor.record.store import Store
from agent_supervisor.record.trace import TraceWriter
from agent_supervisor.runtime.engine_updates import EngineUpdates
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.baselines import AcceptanceBaselines, EngineUpdate
from agent_supervisor.telemetry.window import Window

__all__ = ["UNTAINTING", "BaselineWriter", "GoodRuns", "good_run_baseline"]

logger = logging.getLogger(__name__)

#: Warnings about the supervisor's view, not the run: a build without a series
#: (``telemetry_degraded``) is still a good run.
UNTAINTING = frozenset({"telemetry_degraded"})


class BaselineWriter(Protocol):
    """What ``GoodRuns`` writes through (``RecordWriter``: spooled if the store is down)."""

    store: Store

    def submit(self, record: AddBaseline) -> None: ...

    async def flush(self) -> None: ...


def good_run_baseline(window: Window, policy: Policy, rung: int,
                      now_s: float) -> AddBaseline | None:
    """The baseline row for the current run in ``window`` if it has been good for long
    enough (the caller rules out runs with findings), else None. Pure.

    A speculative mode needs ``lottery_drafts`` drafts in the window (its acceptance by
    position); a mode without speculation needs ``guards.engine_update.min_busy_seconds``
    with requests running (its tokens/s per running request, what an engine update is
    judged by: issue 29). Tokens/s per request are measured while requests ran
    (``engine_update.busy_rate``), else over the whole span."""
    mode = policy.modes[rung]
    cfg = policy.guards.speculative
    s = window.latest
    if s is None or s.engine_state is not EngineState.READY \
            or s.engine_state_since_s is None or s.engine_run_id is None \
            or now_s - s.engine_state_since_s < cfg.good_run_seconds:
        return None
    run = Window.of([x for x in window if x.engine_run_id == s.engine_run_id
                     and x.t_s >= s.engine_state_since_s])
    first = next(iter(run), None)
    if first is None:
        return None
    busy = busy_rate(list(run))
    acceptance: list[float] | None = None
    if mode.speculative:
        got = run_acceptance(run, first.t_s, now_s)
        if got is None or got[0] < cfg.lottery_drafts or not got[1]:
            return None
        acceptance = [round(a, 4) for a in got[1]]
    elif busy is None or busy[2] < policy.guards.engine_update.min_busy_seconds:
        return None
    span = now_s - first.t_s
    running = [x.requests_running for x in run if x.requests_running is not None]
    mean_running = max(1.0, statistics.fmean(running)) if running else 1.0
    generated = run.increase("generation_tokens_total", first.t_s)
    total = generated[0] / generated[1] if generated and generated[1] > 0 else 0.0
    per_request, concurrency = (busy[0], busy[1]) if busy is not None \
        else (total / mean_running, mean_running)
    return AddBaseline(
        mode=mode.name, args_digest=args_digest(policy, mode),
        concurrency=max(1, round(concurrency)), measured_at=datetime.now(UTC),
        tokens_per_second_per_request=per_request, tokens_per_second_total=total,
        ttft_seconds=None, acceptance_by_position=acceptance,
        peak_rss_bytes=None, mem_available_min_bytes=None, seconds=round(span, 1),
        requests=0, source="run")


class GoodRuns:
    """Watches each tick's decision; writes one baseline per good run through ``writer``
    (with the engine version it ran on), then reloads the usual acceptance from the store
    and hands it to ``learned``. ``trace``: where the update comparison is traced."""

    def __init__(self, policy: PolicyHolder, window: Window, writer: BaselineWriter,
                 trace: TraceWriter | None = None, *,
                 learned: Callable[[AcceptanceBaselines], None]) -> None:
        self.policy = policy
        self.updates = EngineUpdates(policy, window, lambda: writer.store, trace)
        """Each run's engine version (recorded with its row, so a later version is
        compared with it) and the comparison ``decide()`` gets (``update``)."""
        self.window = window
        self.writer = writer
        self.learned = learned
        self._troubled: set[str] = set()
        self._stored: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def observe(self, decision: Decision, rung: int, now_s: float) -> AddBaseline | None:
        """After each decision: mark the run troubled on an action or a warning or worse,
        else store its baseline once it qualifies. Returns the row written, if any."""
        s = self.window.latest
        run_id = s.engine_run_id if s is not None else None
        if run_id is None or run_id in self._stored:
            return None
        if decision.action is not Action.HOLD or any(
                f.severity.rank >= Severity.WARNING.rank and f.kind not in UNTAINTING
                for f in decision.findings):
            self._troubled.add(run_id)
        if run_id in self._troubled:
            return None
        row = good_run_baseline(self.window, self.policy.current, rung, now_s)
        if row is None:
            return None
        self._stored.add(run_id)
        row = dataclasses.replace(row, engine_version=self.updates.version(run_id))
        self.writer.submit(row)
        with contextlib.suppress(RuntimeError):           # no loop: nothing to reload
            task = asyncio.get_running_loop().create_task(self._relearn())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return row

    def update(self) -> EngineUpdate | None:
        """This tick's comparison with the last good run on another engine version
        (``EngineUpdates.current``; issue 29)."""
        return self.updates.current()

    async def _relearn(self) -> None:
        """Once the row is in the store: the lottery's usual acceptance includes it."""
        await self.writer.flush()
        acceptance = await asyncio.to_thread(load_acceptance, self.writer.store,
                                             self.policy.current)
        logger.info("usual acceptance by position, with the newest good runs: %s",
                    acceptance)
        self.learned(acceptance)

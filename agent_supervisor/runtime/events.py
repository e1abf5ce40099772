"""``EngineEvents``: what the service does when the launcher reports a state change.

STARTING: extend systemd's start timeout. READY: tell systemd, let the gateway admit
again (``Executor.engine_ready``), record the time to ready and ask the engine its vLLM
version. CRASHED: decide at once (no wait for the next tick). STOPPED: close the run's
row with its exit status and outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

import httpx

from agent_supervisor.act.effects import Executor
from agent_supervisor.act.engine_run import EngineRun
from agent_supervisor.act.systemd import Notifier
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder
from agent_supervisor.sense.probes import engine_version
from agent_supervisor.states import EngineState

__all__ = ["EngineEvents"]

logger = logging.getLogger(__name__)


class EngineEvents:
    """The launcher's ``on_change`` callback. ``spawn`` runs a coroutine as a task the
    service cancels at shutdown; ``poke`` asks for a decision at once; ``base_url`` gives
    the engine's URL."""

    def __init__(self, policy: PolicyHolder, recorder: Recorder, notifier: Notifier, *,
                 spawn: Callable[[Coroutine[Any, Any, None]], None],
                 poke: Callable[[], None], base_url: Callable[[], str]) -> None:
        self._policy = policy
        self.recorder = recorder
        self.notifier = notifier
        self.executor: Executor | None = None
        self.ladder: Ladder | None = None
        self._spawn = spawn
        self._poke = poke
        self._base_url = base_url

    def __call__(self, run: EngineRun, state: EngineState) -> None:
        status = f"mode {run.mode} (rung {run.rung}): engine {state}, run {run.run_id}"
        if state is EngineState.STARTING:
            self.notifier.extend_timeout(self._policy.current.engine.start_timeout_seconds + 30)
        if state is EngineState.READY:
            self.notifier.ready(status)
        self.notifier.status(status)
        if state is EngineState.READY:
            self._ready(run)
        elif state is EngineState.CRASHED:
            self._poke()
        elif state is EngineState.STOPPED and (run.error is not None or run.pid is not None):
            self.recorder.run_changed(run.run_id, {
                "ended_at": run.ended_at, "exit_code": run.exit_code,
                "exit_signal": run.exit_signal, "planned_stop": run.planned_stop,
                "outcome": str(run.crash_reason or run.kill_reason or "stopped"),
                "error": run.error, "sigterm_ignored": run.sigterm_ignored})

    def _ready(self, run: EngineRun) -> None:
        if self.executor is not None:
            self.executor.engine_ready(run.rung)
        logger.info("engine ready: OpenAI API at %s/v1 (mode %s, run %s, %.1f s to ready)",
                    self._base_url(), run.mode, run.run_id, run.startup_seconds or 0)
        self.recorder.run_changed(run.run_id, {"ready_at": run.ready_at,
                                               "startup_seconds": run.startup_seconds})
        if self.ladder is not None and run.startup_seconds is not None:
            self.ladder.started(run.mode, run.startup_seconds)   # the learned start budget
        self.recorder.engine_serving(run.mode, run.run_id)
        self._spawn(self._record_engine_version(run))

    async def _record_engine_version(self, run: EngineRun) -> None:
        """Ask the ready engine its vLLM version and keep it with the run."""
        async with httpx.AsyncClient() as client:
            version = await engine_version(client, self._base_url(), 5.0)
        if version is not None:
            self.recorder.run_changed(run.run_id, {"engine_version": version})

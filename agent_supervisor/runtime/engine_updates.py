"""``EngineUpdates``: each run's engine version, and the last good run on another (issue 29).

Once a run serves, its engine's version is read once (vLLM ``GET /version``, llama-server
``GET /props`` ``build_info``: ``sense.golden.running_version``, the golden canary's
reading) and, for a container runtime, the image is appended (`` image <image>``: an image
updated under the same arguments is a new version). Then the newest good run of the same
mode and arguments whose version is known (``record.baselines.last_good_run``) is looked
up: when it ran on another version, the ``EngineUpdate`` it makes is what ``decide()``
gets each tick of this run (the ``engine_update`` guard compares the two; a trace records
it as an ``engine_update`` line). ``GoodRuns`` records the version with the run's own row
once the run qualifies as good, so a version that serves well becomes the next baseline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx

from agent_supervisor.errors import StoreError
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.record.baselines import last_good_run
from agent_supervisor.record.store import Store
from agent_supervisor.record.trace import TraceWriter
from agent_supervisor.sense.golden import running_version
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.baselines import EngineUpdate
from agent_supervisor.telemetry.window import Window

__all__ = ["VERSION_TIMEOUT_SECONDS", "EngineUpdates"]

logger = logging.getLogger(__name__)

#: How long one version request may take (a served engine answers ``/version`` at once;
#: a busy CPU box can be seconds late).
VERSION_TIMEOUT_SECONDS = 10.0


class EngineUpdates:
    """Per run: its version and the comparison to hand to ``decide()``.

    ``window``: the service's window (its newest sample says which run serves);
    ``store()``: the record; ``trace``: where an ``engine_update`` line goes.
    ``current()`` is called once a tick, inside the event loop; it starts the reading in
    the background (one request with a client of its own, at most
    ``VERSION_TIMEOUT_SECONDS`` per endpoint) and never blocks."""

    def __init__(self, policy: PolicyHolder, window: Window, store: Callable[[], Store],
                 trace: TraceWriter | None = None) -> None:
        self.policy = policy
        self.window = window
        self._store = store
        self._trace = trace
        self._versions: dict[str, str] = {}
        self._asked: set[str] = set()
        self._update: EngineUpdate | None = None
        self._task: asyncio.Task[None] | None = None

    def version(self, run_id: str) -> str | None:
        """The engine version run ``run_id`` served on, once read; else None."""
        return self._versions.get(run_id)

    def current(self) -> EngineUpdate | None:
        """The comparison for the serving run, if its version differs from the last good
        run's; starts reading the version of a run seen serving for the first time."""
        s = self.window.latest
        if s is None or s.engine_run_id is None or s.engine_rung is None:
            return None
        if s.engine_state is EngineState.READY and s.engine_run_id not in self._asked:
            self._asked.add(s.engine_run_id)
            self._task = asyncio.get_running_loop().create_task(
                self._learn(s.engine_run_id, s.engine_rung))
        up = self._update
        return up if up is not None and up.run_id == s.engine_run_id else None

    async def _learn(self, run_id: str, rung: int) -> None:
        policy = self.policy.current
        if rung >= len(policy.modes):
            return
        eng = policy.engine
        async with httpx.AsyncClient() as client:        # once a run: no client kept
            version = await running_version(client, f"http://{eng.host}:{eng.port}",
                                             VERSION_TIMEOUT_SECONDS)
        if version is None:
            logger.info("engine version of run %s unknown: no update comparison", run_id)
            return
        if eng.runtime == "container" and eng.container is not None:
            version = f"{version} image {eng.container.image}"
        self._versions[run_id] = version
        mode = policy.modes[rung]
        try:
            previous = await asyncio.to_thread(last_good_run, self._store(), policy, mode)
        except StoreError as exc:         # the record down: no comparison, said so
            logger.warning("last good run of %s unreadable (%s: %s): no update comparison",
                           mode.name, type(exc).__name__, exc)
            return
        if previous is None or previous.version == version:
            logger.info("run %s of %s serves on engine %s (last good run: %s)", run_id,
                        mode.name, version, previous.version if previous else "none")
            return
        self._update = EngineUpdate(run_id=run_id, mode=mode.name, version=version,
                                    previous=previous)
        logger.info("run %s of %s serves on engine %s; the last good run was on %s (%s): "
                    "compared with it", run_id, mode.name, version, previous.version,
                    previous.measured_at)
        if self._trace is not None:
            self._trace.engine_update(time.monotonic(), self._update)

"""The service's listeners (the gateway, the admin API) and its job scheduler."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from agent_supervisor.policy import Policy, PolicyHolder
from agent_supervisor.runtime.gateway_face import GatewayFace
from agent_supervisor.serve import AppServer
from agent_supervisor.show.api.app import create_admin_app, load_token
from agent_supervisor.show.api.deps import AdminBackend

__all__ = ["Listeners", "Scheduler"]

logger = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]


class Listeners:
    """The gateway (if enabled) and the admin API (if enabled) over ``backend``."""

    def __init__(self, policy: PolicyHolder, gateway: GatewayFace | None,
                 backend: AdminBackend) -> None:
        self._policy = policy
        self.gateway = gateway
        self.backend = backend
        self.admin: AppServer | None = None

    async def start(self) -> None:
        """Start both. Raises ListenError (an OSError) when a port cannot be bound."""
        if self.gateway is not None:
            await self.gateway.start()
        adm = self._policy.current.admin
        if adm.enabled:
            self.admin = AppServer(create_admin_app(self.backend, token=load_token(
                self.backend)), adm.host, adm.port, name="admin API")
            await self.admin.start()
            logger.info("admin API and dashboard at http://%s:%d/ (metrics: /metrics)",
                        adm.host, adm.port)

    async def stop(self, *, leave_gateway: bool = False) -> None:
        """Stop what was started (``leave_gateway``: a gateway process keeps running)."""
        if self.gateway is not None:
            await self.gateway.stop(leave_running=leave_gateway)
        if self.admin is not None:
            await self.admin.stop()


class Scheduler:
    """APScheduler for the tick and the periodic jobs; the tick follows a reload.

    ``stop()`` is quiet (issue 18): APScheduler's shutdown cancels the jobs still
    running and logs each as "raised an exception" with a CancelledError traceback (one
    shutdown in five). So new runs are paused first, the running ones are let finish
    (they see the service stopping and return), and only then is it shut down.
    """

    def __init__(self, policy: PolicyHolder) -> None:
        self._policy = policy
        self._scheduler: AsyncIOScheduler | None = None
        self._running: set[asyncio.Task[object]] = set()
        policy.on_swap(self._swapped)

    def start(self, tick: Job, jobs: list[tuple[Job, float]]) -> None:
        """Run ``tick`` every ``sampling.tick_seconds`` and each job at its interval."""
        scheduler = self._scheduler = AsyncIOScheduler(event_loop=asyncio.get_running_loop())
        for job, seconds, name in ((tick, self._policy.current.sampling.tick_seconds, "tick"),
                                   *((j, s, j.__name__) for j, s in jobs)):
            scheduler.add_job(self._tracked(job), "interval", seconds=seconds, max_instances=1,
                              coalesce=True, misfire_grace_time=None, id=name)
        scheduler.start()

    def _tracked(self, job: Job) -> Job:
        async def run() -> None:
            task = asyncio.current_task()
            if task is not None:
                self._running.add(task)
            try:
                await job()
            finally:
                if task is not None:
                    self._running.discard(task)
        run.__name__ = job.__name__
        return run

    async def stop(self) -> None:
        """Pause, let running jobs finish, shut down."""
        if self._scheduler is None:
            return
        self._scheduler.pause()
        await asyncio.sleep(0)             # a job submitted just now starts, and is seen
        if self._running:
            await asyncio.wait(list(self._running), timeout=30)
        self._scheduler.shutdown(wait=False)
        self._scheduler = None

    def _swapped(self, old: Policy, new: Policy) -> None:
        if self._scheduler is not None:
            self._scheduler.reschedule_job("tick", trigger="interval",
                                           seconds=new.sampling.tick_seconds)

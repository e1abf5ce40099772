"""A quiet shutdown (issue 18): stopping the service's scheduler while a job runs lets
the job finish and logs no CancelledError traceback. The control shows what
APScheduler's own shutdown does to a running job (one shutdown in five did that)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from agent_supervisor.policy import PolicyHolder
from agent_supervisor.runtime.service_parts import Scheduler
from tests.helpers.policies import fake_engine_policy


class SlowJob:
    """A job that takes 0.3 s (APScheduler needs a coroutine function: ``run``)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.finished = 0

    async def run(self) -> None:
        self.started.set()
        await asyncio.sleep(0.3)
        self.finished += 1


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.ERROR or r.exc_info is not None]


async def test_control_apscheduler_shutdown_cancels_a_running_job_loudly(
        caplog: pytest.LogCaptureFixture) -> None:
    job = SlowJob()
    scheduler = AsyncIOScheduler(event_loop=asyncio.get_running_loop())
    scheduler.add_job(job.run, "interval", seconds=0.05, id="slow")
    scheduler.start()
    await asyncio.wait_for(job.started.wait(), 5)
    scheduler.shutdown(wait=False)
    await asyncio.sleep(0.1)
    assert job.finished == 0
    assert any("raised an exception" in m for m in tracebacks(caplog))


async def test_issue_18_stop_lets_the_running_job_finish_quietly(
        tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    job = SlowJob()
    ticks = SlowJob()
    scheduler = Scheduler(PolicyHolder(fake_engine_policy(tmp_path)))
    scheduler.start(ticks.run, [(job.run, 0.05)])
    await asyncio.wait_for(job.started.wait(), 5)
    await scheduler.stop()
    await asyncio.sleep(0.1)
    assert job.finished >= 1
    assert tracebacks(caplog) == []

"""A running service (fake engine, real SQLite created by the migrations) and an HTTP
client on its admin port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.admin_api import TOKEN, auth  # noqa: F401  (moved; importers use tests.helpers)
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for


@pytest.fixture
async def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Supervisor]:
    monkeypatch.setenv("SUPERVISOR_ADMIN_TOKEN", TOKEN)
    policy = fake_engine_policy(tmp_path, sampling={"tick_seconds": 0.3})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    task = asyncio.create_task(sup.run())
    await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                   what="engine ready")
    yield sup
    sup.request_stop("test over")
    await asyncio.wait_for(task, 30)


@pytest.fixture
async def client(service: Supervisor) -> AsyncIterator[httpx.AsyncClient]:
    base = f"http://127.0.0.1:{service.policy.admin.port}"
    async with httpx.AsyncClient(base_url=base, timeout=10) as c:
        yield c



"""Issue 19's left item: the dashboard's engine-log view is live, from server-sent events
(api/engine/log/stream) read with fetch() and the bearer token, not polled. Headless
Chromium against a running service (fake engine, real HTTP) whose admin API is bound
off loopback, so reads need the token: a request sent to the engine makes the engine
write a log line, and the line appears on the page over the one open stream."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest

from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.browser

TOKEN = "stream-token"


async def test_issue_19_engine_log_is_live_over_sse_with_the_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from playwright.async_api import Dialog, Request, async_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium)")
    monkeypatch.setenv("SUPERVISOR_ADMIN_TOKEN", TOKEN)
    policy = fake_engine_policy(tmp_path, sampling={"tick_seconds": 0.5},
                                admin={"host": "0.0.0.0"})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    task = asyncio.create_task(sup.run())
    log_requests: list[str] = []
    stream_auth: list[str | None] = []

    async def on_dialog(dialog: Dialog) -> None:
        await dialog.accept(TOKEN)

    def on_request(req: Request) -> None:
        if "/api/engine/log" in req.url:
            log_requests.append(req.url)
            if "/stream" in req.url:
                stream_auth.append(req.headers.get("authorization"))

    admin = f"http://127.0.0.1:{policy.admin.port}"
    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                       what="engine ready")
        async with httpx.AsyncClient(timeout=5) as client:
            refused = await client.get(f"{admin}/api/engine/log/stream")
            assert refused.status_code == 401               # reads need the token here
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                               args=CHROMIUM_ARGS)
            page = await browser.new_page()
            page.on("dialog", on_dialog)
            page.on("request", on_request)
            await page.goto(f"{admin}/")
            await page.wait_for_function("window.engineLog.connected && "
                                         "window.engineLog.events >= 1", timeout=20_000)
            marker = uuid.uuid4().hex
            engine = f"http://127.0.0.1:{policy.engine.port}"
            async with httpx.AsyncClient(timeout=5) as client:
                await client.get(f"{engine}/v1/models?live={marker}")
            # The engine writes "request /v1/models?live=MARKER"; the page shows it.
            await wait_for(lambda: marker in sup.launcher.run.log_path.read_text(),
                           timeout=5, what="the engine's own log line")
            await page.wait_for_function(
                "(m) => document.querySelector('#engine-log').textContent"
                ".includes(`request /v1/models?live=${m}`)", arg=marker, timeout=5_000)
            assert "mode fast" in await page.locator("#log-where").inner_text()
            # Live over one stream with the token in the header, no polling of the log.
            assert [u for u in log_requests if "/stream" not in u] == []
            assert stream_auth == [f"Bearer {TOKEN}"], log_requests
            await browser.close()
    finally:
        sup.request_stop("test over")
        assert await asyncio.wait_for(task, 30) == 0

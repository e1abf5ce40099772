"""Issue 19: the dashboard's gateway card shows requests, 429s and upstream latency from
the service's /metrics, for real requests through the gateway (fake engine, headless
Chromium): one request holds the only slot, two more find the queue full (HTTP 429)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS
from tests.helpers.gateway_rig import chat
from tests.helpers.paths import ROOT
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.browser


async def test_issue_19_gateway_card_counts_requests_and_429s(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium)")
    policy = fake_engine_policy(
        tmp_path, fake_args=["--tokens", "4", "--token-delay", "0.3"],
        sampling={"tick_seconds": 0.3},
        modes=[{"name": "fast", "gateway": {"max_concurrency": 1, "max_queue": 0}},
               {"name": "safe"}])
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    task = asyncio.create_task(sup.run())
    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                       what="engine ready")
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                               args=CHROMIUM_ARGS)
            page = await browser.new_page(viewport={"width": 1440, "height": 900})
            await page.goto(f"http://127.0.0.1:{policy.admin.port}/")
            await page.wait_for_function("window.gatewayView.prev !== null", timeout=20_000)
            url = f"http://127.0.0.1:{policy.gateway.port}/v1/chat/completions"
            async with httpx.AsyncClient(timeout=30) as c:
                first = asyncio.create_task(c.post(url, json=chat()))
                status = f"http://127.0.0.1:{policy.gateway.port}/gateway/status"
                for _ in range(200):      # the first request holds the one slot
                    if (await c.get(status)).json()["requests_in_flight"] == 1:
                        break
                    await asyncio.sleep(0.05)
                refused = await asyncio.gather(c.post(url, json=chat()),
                                               c.post(url, json=chat()))
                assert [r.status_code for r in refused] == [429, 429]
                assert (await first).status_code == 200
            await page.wait_for_function(
                "window.gatewayView.last && window.gatewayView.last.total_429 === 2"
                " && window.gatewayView.last.latency_p50_seconds !== null", timeout=20_000)
            last = await page.evaluate("window.gatewayView.last")
            assert last["total_requests"] == 3
            assert last["latency_p50_seconds"] is not None and last["latency_p50_seconds"] > 0
            text = await page.locator("#gateway-stats").inner_text()
            assert "since start: 3 requests, 2 answered 429" in text
            (ROOT / "test-artifacts").mkdir(exist_ok=True)
            await page.locator("#gateway-section").screenshot(
                path=str(ROOT / "test-artifacts" / "gateway-card.png"))
            await browser.close()
    finally:
        sup.request_stop("test over")
        assert await asyncio.wait_for(task, 30) == 0

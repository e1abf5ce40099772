"""Issue 16 (and 19's last item): the dashboard shows the fleet when the record holds
several hosts. A real service (fake engine) on SQLite; another box's supervisor life is
written into the same database through the store, as a second supervisor on a shared
PostgreSQL would write it. With one host the card stays hidden."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent_supervisor.act.incident import Incident
from agent_supervisor.record.records import AddIncident, ServiceHeartbeat
from agent_supervisor.record.service_runs import start_service_run
from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS
from tests.helpers.paths import ROOT
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.browser


def _other_box(url: str) -> None:
    """box-b's supervisor: alive on rung 1 with a worker-node incident."""
    other = Store.open(url, fleet="test", host="box-b")
    try:
        life = start_service_run(store=other, boot_id=None, started_at=datetime.now(UTC))
        other.apply(ServiceHeartbeat(service_run_id=life.service_run_id, at=datetime.now(UTC),
                                     rung=1, mode="safe", engine_state="ready"))
        other.apply(AddIncident(incident=Incident(
            kind="node_memory_floor", severity="emergency", started_at=datetime.now(UTC),
            action="kill_now", explanation="worker node spark-2 at the floor",
            findings=[{"kind": "node_memory_floor", "evidence": {"node": "spark-2"}}])))
    finally:
        other.close()


async def test_issue_16_fleet_card_appears_with_a_second_host(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium)")
    policy = fake_engine_policy(tmp_path, sampling={"tick_seconds": 0.3},
                                storage={"host_name": "box-a", "heartbeat_seconds": 0.5})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet, host="box-a"))
    task = asyncio.create_task(sup.run())
    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                       what="engine ready")
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                               args=CHROMIUM_ARGS)
            page = await browser.new_page(viewport={"width": 1440, "height": 900})
            url = f"http://127.0.0.1:{policy.admin.port}/"
            await page.goto(url)
            await page.wait_for_function("window.fleetView.members !== null", timeout=20_000)
            assert await page.evaluate("window.fleetView.hosts") == 1
            assert await page.locator("#fleet-section").is_hidden()

            await asyncio.to_thread(_other_box, policy.database_url)
            await page.reload()
            await page.wait_for_function("window.fleetView.hosts === 2", timeout=20_000)
            assert await page.locator("#fleet-section").is_visible()
            a = await page.locator('#fleet-rows tr[data-host="box-a"]').inner_text()
            b = await page.locator('#fleet-rows tr[data-host="box-b"]').inner_text()
            assert "box-a (this)" in a and "0 fast" in a and "alive" in a
            assert "1 safe" in b and "ready" in b and "alive" in b
            assert "node_memory_floor [spark-2] (emergency" in b
            (ROOT / "test-artifacts").mkdir(exist_ok=True)
            await page.locator("#fleet-section").screenshot(
                path=str(ROOT / "test-artifacts" / "fleet-card.png"))
            await browser.close()
    finally:
        sup.request_stop("test over")
        await asyncio.wait_for(task, 30)

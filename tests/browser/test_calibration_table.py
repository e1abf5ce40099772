"""Issue 13: ``supervisor calibrate --profiles`` stores a row per rung per profile (the
fake engine, a real process, answers the load; real SQLite), and the dashboard's
calibration table shows them in headless Chromium, the best rung of each profile marked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent_supervisor.calibrate import calibrate
from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS
from tests.helpers.paths import ROOT
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.browser


async def test_issue_13_calibrated_profiles_are_stored_and_shown(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium)")
    policy = fake_engine_policy(tmp_path, fake_args=["--tokens", "8"],
                                sampling={"tick_seconds": 0.5})
    store = Store.open(policy.database_url, fleet=policy.fleet)
    rows = await calibrate(policy, store, concurrency=(1,), seconds=1.5,
                           profiles=("code", "short_chat"), emit=lambda line: None)
    assert {(r["mode"], r.get("profile")) for r in rows} == {
        (m, p) for m in ("fast", "safe") for p in (None, "code", "short_chat")}
    stored = store.profile_baselines()
    assert sorted((r.mode, r.profile) for r in stored) == [
        ("fast", "code"), ("fast", "short_chat"), ("safe", "code"), ("safe", "short_chat")]
    assert {r.mode for r in store.baselines()} == {"fast", "safe"}   # the guards' rows
    best = {}
    for p in ("code", "short_chat"):
        per = {r.mode: r.tokens_per_second_total for r in stored if r.profile == p}
        best[p] = max(per, key=per.get)
    sup = Supervisor(policy, store)
    task = asyncio.create_task(sup.run())
    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                       what="engine ready")
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                               args=CHROMIUM_ARGS)
            page = await browser.new_page(viewport={"width": 1440, "height": 900})
            await page.goto(f"http://127.0.0.1:{policy.admin.port}/")
            await page.wait_for_selector("#calibration-rows tr", timeout=20_000)
            assert await page.locator("#calibration-rows tr").count() == 4
            for p, mode in best.items():
                row = page.locator(f'#calibration-rows tr[data-profile="{p}"].best')
                assert await row.count() == 1
                assert await row.get_attribute("data-mode") == mode
            text = await page.locator("#calibration-section").inner_text()
            assert "short_chat" in text and "code" in text and "(stale)" not in text
            (ROOT / "test-artifacts").mkdir(exist_ok=True)
            await page.locator("#calibration-section").screenshot(
                path=str(ROOT / "test-artifacts" / "calibration-table.png"))
            await browser.close()
    finally:
        sup.request_stop("test over")
        assert await asyncio.wait_for(task, 30) == 0

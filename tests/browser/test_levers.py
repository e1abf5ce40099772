"""Issue 19: the dashboard's levers in headless Chromium against a running service (fake
engine, real HTTP, real token check): every button says what it will do, asks to confirm,
asks for the token once (kept for the tab), and moves the ladder; the incident list is on
the first screen; the engine's log is shown live and follows a restart; screenshots in
test-artifacts/."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS
from tests.helpers.paths import ROOT
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.browser

TOKEN = "lever-token"
SHOTS = ROOT / "test-artifacts"


async def test_issue_19_every_button_moves_the_ladder(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from playwright.async_api import Dialog, async_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium)")
    monkeypatch.setenv("SUPERVISOR_ADMIN_TOKEN", TOKEN)
    policy = fake_engine_policy(tmp_path, sampling={"tick_seconds": 0.3})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    task = asyncio.create_task(sup.run())
    prompts: list[str] = []
    confirms: list[str] = []
    answer = {"confirm": True}

    async def on_dialog(dialog: Dialog) -> None:
        if dialog.type == "prompt":
            prompts.append(dialog.message)
            await dialog.accept(TOKEN)
        elif answer["confirm"]:
            confirms.append(dialog.message)
            await dialog.accept()
        else:
            confirms.append(dialog.message)
            await dialog.dismiss()

    async def ready_on(rung: int) -> None:
        await wait_for(lambda: sup.ladder.rung == rung
                       and sup.launcher.state is EngineState.READY, timeout=30,
                       what=f"engine ready on rung {rung}")

    try:
        await ready_on(0)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                               args=CHROMIUM_ARGS)
            page = await browser.new_page(viewport={"width": 1440, "height": 900})
            page.on("dialog", on_dialog)
            await page.goto(f"http://127.0.0.1:{policy.admin.port}/")
            await page.wait_for_function("window.dashboard.polls >= 1", timeout=20_000)
            assert await page.locator("#lever-step-up").is_disabled()      # top rung
            box = await page.locator("#incidents-section").bounding_box()
            assert box is not None and box["y"] < 900          # within the first screen
            first_line = sup.launcher.run.log_path.read_text().splitlines()[0]
            await page.wait_for_function(
                "(line) => document.querySelector('#engine-log').textContent.includes(line)",
                arg=first_line, timeout=10_000)
            assert await page.locator("#lever-resume").is_disabled()       # not paused

            # A declined confirmation does nothing.
            answer["confirm"] = False
            await page.click("#lever-step-down")
            assert confirms[-1].startswith("Step down from fast to safe: the engine is "
                                           "drained and restarted in the safer mode")
            await asyncio.sleep(1.0)
            assert sup.ladder.rung == 0 and sup.ladder.state.requested is None and not prompts
            answer["confirm"] = True

            await page.click("#lever-step-down")                 # a real step down
            await ready_on(1)
            assert len(prompts) == 1 and "kept for this tab only" in prompts[0]
            assert await page.evaluate("Object.values(sessionStorage)") == [TOKEN]
            assert "Step down: done; mode fast, stepping to safe" in \
                await page.locator("#lever-note").inner_text()
            await page.wait_for_function(
                "document.querySelector('#ladder li.current').dataset.mode === 'safe'",
                timeout=10_000)
            await page.wait_for_function(
                "document.querySelector('#meta').textContent.includes("
                "' of 30 min before a step up')", timeout=10_000)   # hysteresis.calm_seconds
            SHOTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(SHOTS / "levers-stepped-down.png"), full_page=True)

            await page.wait_for_function("!document.querySelector('#lever-step-up').disabled",
                                         timeout=10_000)
            await page.click("#lever-step-up")
            await ready_on(0)
            await page.select_option("#lever-mode", "safe")
            await page.click("#lever-pin")
            assert confirms[-1].startswith("Pin the ladder to safe")
            await ready_on(1)
            assert sup.ladder.state.pinned == 1
            await page.wait_for_function("!document.querySelector('#lever-unpin').disabled",
                                         timeout=10_000)
            await page.click("#lever-unpin")
            await wait_for(lambda: sup.ladder.state.pinned is None, timeout=10, what="unpinned")
            await page.click("#lever-pause")
            await wait_for(lambda: sup.ladder.state.paused, timeout=10, what="paused")
            await page.wait_for_function(
                "document.querySelector('#ladder li.current .tag.paused') !== null",
                timeout=10_000)
            await page.screenshot(path=str(SHOTS / "levers-paused.png"), full_page=True)
            await page.click("#lever-resume")
            await wait_for(lambda: not sup.ladder.state.paused, timeout=10, what="resumed")
            run_id = sup.launcher.run.run_id
            await page.click("#lever-restart")
            assert confirms[-1].startswith("Restart the engine in ")
            await wait_for(lambda: sup.launcher.run.run_id != run_id
                           and sup.launcher.state is EngineState.READY, timeout=30,
                           what="the engine restarted")
            new_run = sup.launcher.run.run_id
            await page.wait_for_function(
                "(run) => document.querySelector('#engine-log').textContent"
                ".includes(`--- engine run ${run} (mode `)", arg=new_run, timeout=10_000)
            await page.screenshot(path=str(SHOTS / "levers-restarted-log.png"), full_page=True)
            assert len(prompts) == 1                              # the token was asked once
            assert len(confirms) == 8
            await browser.close()
    finally:
        sup.request_stop("test over")
        assert await asyncio.wait_for(task, 30) == 0

"""Issue 31 item 1: the dashboard shows what advise mode would have done in its own colour.

Headless Chromium against the whole service in ``mode: advise`` (stand-in engine, real
processes, real SQLite, real HTTP): the EngineCore SIGKILLed is a ``would_restart``
incident, drawn dashed on violet with an "advice" tag; the current rung says "advise
only"; the last decision reads "would restart"; an incident carried out (the
``supervision_mode`` switch recorded at start) keeps the ordinary colour. Screenshot in
test-artifacts/."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS
from tests.helpers.paths import ROOT
from tests.helpers.policies import fake_engine_policy
from tests.helpers.processes import titled_child
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.browser

SHOTS = ROOT / "test-artifacts"
FAST = {"tick_seconds": 0.2, "probe_timeout_seconds": 1}

#: The colours style.css gives advice (violet) and an incident carried out (none).
ADVISORY_BACKGROUND = "rgb(245, 243, 255)"       # .incident.advisory #f5f3ff
ADVICE_TAG = "rgb(124, 58, 237)"                 # .advice #7c3aed


async def test_issue_31_advice_is_drawn_apart_from_what_was_done(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium)")
    policy = fake_engine_policy(tmp_path, sampling=FAST, mode="advise",
                                restart={"restart_delay_seconds": 0})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    reader = Store.open(policy.database_url, fleet=policy.fleet)
    task = asyncio.create_task(sup.run())
    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                       what="the engine launched in advise mode")
        run = sup.launcher.run
        assert run is not None
        await wait_for(lambda: titled_child(run.pid, "VLLM::EngineCore") is not None,
                       what="EngineCore")
        os.kill(titled_child(run.pid, "VLLM::EngineCore"), signal.SIGKILL)

        async def advice_recorded() -> bool:
            await sup.writer.flush()
            return any(i.action == "would_restart" for i in reader.incidents())
        for _ in range(100):
            if await advice_recorded():
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("no would_restart recorded within 10 s of the crash")
        (advice,) = [i for i in reader.incidents() if i.action == "would_restart"]
        done = [i for i in reader.incidents() if not i.action.startswith("would_")]
        assert done, "no incident carried out to compare with (the supervision_mode record)"

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                               args=CHROMIUM_ARGS)
            page = await browser.new_page(viewport={"width": 1440, "height": 900})
            await page.goto(f"http://127.0.0.1:{policy.admin.port}/")
            await page.wait_for_function("window.dashboard.polls >= 1", timeout=20_000)
            item = page.locator(f"#incidents li[data-id='{advice.id}']")
            await item.wait_for(timeout=10_000)
            assert "advisory" in (await item.get_attribute("class") or "").split()
            style = await item.evaluate(
                "e => [getComputedStyle(e).backgroundColor, getComputedStyle(e).borderLeftStyle]")
            assert style == [ADVISORY_BACKGROUND, "dashed"], style
            tag = item.locator(".incident-head .advice")
            assert await tag.inner_text() == "advice"
            assert await tag.evaluate("e => getComputedStyle(e).backgroundColor") == ADVICE_TAG
            assert "→ would_restart: would have: restart of mode fast" in \
                await item.locator(".incident-line").inner_text()

            plain = page.locator(f"#incidents li[data-id='{done[0].id}']")
            assert "advisory" not in (await plain.get_attribute("class") or "").split()
            assert await plain.locator(".advice").count() == 0
            assert await plain.evaluate(
                "e => getComputedStyle(e).borderLeftStyle") == "solid"

            current = page.locator("#ladder li.current")
            assert "advise only" in await current.locator(".tag.advise").inner_text()
            await page.wait_for_function(
                "document.querySelector('#decision .advice')?.textContent === "
                "'would restart'", timeout=10_000)
            SHOTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(SHOTS / "advise-mode-advice.png"), full_page=True)
            await browser.close()
        assert sup.launcher.state is EngineState.CRASHED      # still nothing done
        assert [r.run_id for r in reader.runs()] == [run.run_id]
    finally:
        sup.request_stop()
        await asyncio.wait_for(task, 30)

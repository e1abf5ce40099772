"""The ops dashboard in headless Chromium (Debian's package) against a real running
service: the fake engine, a real SQLite store, the admin API on a free port. The charts
draw from live telemetry, a real crash (the EngineCore child SIGKILLed) shows up in the
incident list, its evidence opens on click, and a screenshot lands in test-artifacts/."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import psutil
import pytest

from agent_supervisor.act.effects import LOG_TAIL_LINES
from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS
from tests.helpers.paths import ROOT
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.browser

SCREENSHOT = ROOT / "test-artifacts" / "dashboard.png"
CHART_IDS = ("memory", "psi", "gpu", "kv", "requests", "tokens", "spec")

#: True once every chart has a canvas of non-zero size and the memory chart has drawn
#: at least three samples of MemAvailable (the page keeps its uPlot objects on
#: ``window.dashboard.charts``).
CHARTS_DRAWN = """(ids) => {
  const charts = window.dashboard && window.dashboard.charts;
  if (!charts || !charts.memory) return false;
  const drawn = ids.every((id) => {
    const canvas = document.querySelector(`#chart-${id} canvas`);
    return canvas && canvas.width > 0 && canvas.height > 0;
  });
  const mem = charts.memory.data[1].filter((v) => v !== null);
  return drawn && mem.length >= 3;
}"""


def engine_core(sup: Supervisor) -> psutil.Process:
    """The fake engine's ``VLLM::EngineCore`` child (its argv[0], as vLLM's title)."""
    api_server = psutil.Process(sup.launcher.run.pid)
    (core,) = [p for p in api_server.children(recursive=True)
               if p.cmdline()[:1] == ["VLLM::EngineCore"]]
    return core


async def test_dashboard_shows_live_charts_and_a_real_incident(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium);"
                    " or deselect these tests with -m 'not browser'")
    policy = fake_engine_policy(tmp_path, sampling={"tick_seconds": 0.5})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    task = asyncio.create_task(sup.run())
    errors: list[str] = []
    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                       what="engine ready")
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                               args=CHROMIUM_ARGS)
            page = await browser.new_page(viewport={"width": 1440, "height": 900})
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            page.on("console", lambda msg: errors.append(f"console: {msg.text}")
                    if msg.type == "error" else None)
            await page.goto(f"http://127.0.0.1:{policy.admin.port}/")

            # 1. Live charts drawn from the running service's telemetry.
            await page.wait_for_function(CHARTS_DRAWN, arg=list(CHART_IDS), timeout=20_000)
            assert await page.locator("#ladder li.current").inner_text() == "0\nfast"
            assert "engine ready" in await page.locator("#engine").inner_text()
            assert await page.locator("#decision").inner_text() != ""
            floor = await page.evaluate("window.dashboard.charts.memory.data[2].at(-1)")
            assert floor == policy.guards.memory_floor.min_available_bytes / 2**30
            if sup.window.latest.gpu_temperature_c is None:   # no NVML here: unknown
                gpu = await page.evaluate("window.dashboard.charts.gpu.data[1]")
                assert gpu and all(v is None for v in gpu)    # gaps, never 0
                assert "empty" in await page.locator("figure:has(#chart-gpu)").get_attribute(
                    "class")

            # 2. A real crash: the EngineCore dies; the service records it and restarts.
            run_id, crashed_log = sup.launcher.run.run_id, sup.launcher.run.log_path
            engine_core(sup).send_signal(signal.SIGKILL)
            item = page.locator('#incidents li[data-kind="engine_core_died"]')
            await item.wait_for(timeout=20_000)
            await wait_for(lambda: sup.launcher.state is EngineState.READY
                           and sup.launcher.run.run_id != run_id, timeout=20,
                           what="restarted engine ready")

            # 3. Its evidence, one click away.
            await item.click()
            detail = page.locator("#incident-detail")
            await detail.locator("pre.log").wait_for(timeout=10_000)
            text = await detail.inner_text()
            assert "engine_core_died" in text
            assert "EngineCore died while the API server lived on" in text
            assert "crashes_in_interval" in text and "start_limit_burst" in text
            # Issue 19: evidence unknown for this kind (no exit status: the API server
            # lived on) is folded away, not shown as rows of "unknown".
            folded = detail.locator("details.unknown-evidence").first
            assert "unknown for this kind" in await folded.inner_text()
            assert await detail.locator("table.evidence th", has_text="exit_code").count() == 0
            await folded.locator("summary").click()
            assert "exit_code" in await folded.inner_text()
            # The crashed engine's own newest lines (at most LOG_TAIL_LINES): its start-up
            # line is pushed out after ~20 s of /health and /metrics lines at this tick, so
            # which lines show depends on how long the page took (CI failure: "fake engine
            # pid" asserted, 80 request lines shown).
            shown = (await detail.locator("pre.log").inner_text()).strip().splitlines()
            assert 0 < len(shown) <= LOG_TAIL_LINES
            assert "\n".join(shown) in crashed_log.read_text()
            assert "selected" in await item.get_attribute("class")

            # Let a poll or two draw the incident's marker and the restarted engine.
            polls = await page.evaluate("window.dashboard.polls")
            await page.wait_for_function(f"window.dashboard.polls >= {polls + 2}")
            SCREENSHOT.parent.mkdir(exist_ok=True)
            await page.screenshot(path=str(SCREENSHOT), full_page=True)
            await browser.close()
    finally:
        sup.request_stop("test over")
        assert await asyncio.wait_for(task, 20) == 0
    assert errors == []


async def test_dashboard_asks_for_the_token_once_when_reads_need_it(tmp_path: Path) -> None:
    """Bound beyond loopback, reads need the bearer token: the page prompts until it gets
    one that works, keeps it in sessionStorage (this tab only) and sends it; a reload does
    not ask again."""
    from playwright.async_api import Dialog, async_playwright

    token_file = tmp_path / "admin-token"
    token_file.write_text("s3cret\n")
    policy = fake_engine_policy(tmp_path, sampling={"tick_seconds": 0.5},
                                admin={"host": "0.0.0.0", "token_file": str(token_file)})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    task = asyncio.create_task(sup.run())
    answers, asked = ["wrong", "s3cret"], []

    async def answer(dialog: Dialog) -> None:
        asked.append(dialog.message)
        await dialog.accept(answers.pop(0))

    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                       what="engine ready")
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                               args=CHROMIUM_ARGS)
            page = await browser.new_page()
            page.on("dialog", answer)
            await page.goto(f"http://127.0.0.1:{policy.admin.port}/")
            await page.wait_for_function("window.dashboard.polls >= 2", timeout=20_000)
            assert len(asked) == 2 and "token" in asked[0]
            assert await page.evaluate("Object.values(sessionStorage)") == ["s3cret"]
            assert await page.locator("#fleet").inner_text() == "test"
            await page.reload()
            await page.wait_for_function("window.dashboard.polls >= 1", timeout=20_000)
            assert len(asked) == 2
            await browser.close()
    finally:
        sup.request_stop("test over")
        assert await asyncio.wait_for(task, 20) == 0

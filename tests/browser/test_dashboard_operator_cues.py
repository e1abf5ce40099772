"""Issue 33, "the dashboard at 3 a.m.": headless Chromium on the real admin app and its
files over a stand-in service set to the situation (tests/helpers/admin_stub.py): the
rung that just crashed, a gateway holding requests, a starting engine, a log full of
the supervisor's own probe lines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agent_supervisor.policy import Policy
from agent_supervisor.record.store import Store
from tests.helpers.admin_stub import StubService, add_incident, serving, status_of
from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS
from tests.helpers.paths import ROOT
from tests.helpers.policies import fake_engine_policy

pytestmark = pytest.mark.browser

#: The recorded vLLM 0.32.0 run whose EngineCore died: 65 of its lines are the
#: supervisor's own GET /health and /metrics.
CORE_DIED = ROOT / "tests/fixtures/engine_log/cpu-demo-0.32.0-mimo-mtp2-core-died.txt"
MODES = [{"name": "fast"}, {"name": "medium", "args": {"--max-num-seqs": 2}},
         {"name": "safe", "args": {"--max-num-seqs": 1}}]


def stub(tmp_path: Path, **status: Any) -> StubService:
    tmp_path.mkdir(parents=True, exist_ok=True)
    policy: Policy = fake_engine_policy(tmp_path, modes=MODES)
    log = tmp_path / "engine.log"
    log.write_text("")
    return StubService(policy=policy, store=Store.open(policy.database_url, fleet=policy.fleet),
                       log_path=log, st=status_of(policy, **status))


@asynccontextmanager
async def dashboard(service: StubService) -> AsyncIterator[Any]:
    """A page on the dashboard over ``service``, after its first poll; page errors fail."""
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium)")
    errors: list[str] = []
    with serving(service) as url:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                               args=CHROMIUM_ARGS)
            page = await browser.new_page(viewport={"width": 1440, "height": 900})
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(url + "/")
            await page.wait_for_function("window.dashboard.polls >= 1", timeout=20_000)
            yield page
            await browser.close()
    service.store.close()
    assert not errors


async def text_of(page: Any, selector: str, has: str) -> str:
    """The text of ``selector`` once it contains ``has``."""
    await page.wait_for_function(
        "([sel, want]) => (document.querySelector(sel)?.textContent || '').includes(want)",
        arg=[selector, has], timeout=10_000)
    return await page.locator(selector).inner_text()


async def test_issue_33_probe_lines_are_hidden_from_the_log_pane_and_the_tail(
        tmp_path: Path) -> None:
    service = stub(tmp_path, engine_state="crashed")
    log = CORE_DIED.read_text()
    service.log_path.write_text(log)
    incident_id = add_incident(service.store, log_tail=log)
    async with dashboard(service) as page:
        where = await text_of(page, "#log-where", "probe lines hidden")
        pane = await page.locator("#engine-log").inner_text()
        assert "EngineDeadError" in pane                      # what the operator needs
        assert '"GET /health HTTP/1.1" 200' not in pane
        assert '"GET /metrics HTTP/1.1" 200' not in pane
        hidden = int(where.split(" probe line")[0].rsplit(" ", 1)[1])
        assert hidden > 0
        # A line appended later: a probe is hidden and counted, an agent's request shown.
        with service.log_path.open("a") as f:
            f.write('INFO:     127.0.0.1:5 - "GET /metrics HTTP/1.1" 200 OK\n'
                    'INFO:     127.0.0.1:6 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
        await text_of(page, "#engine-log", "127.0.0.1:6 - \"POST /v1/chat/completions")
        await text_of(page, "#log-where", f"{hidden + 1} probe lines hidden")

        await page.click(f"#incidents li[data-id='{incident_id}']")
        head = await text_of(page, "#incident-detail", "probe lines hidden")
        tail = await page.locator("#incident-detail pre.log").inner_text()
        assert "65 probe lines hidden" in head
        assert "EngineDeadError" in tail and "GET /health" not in tail
        assert "GET /metrics" not in tail and "POST /v1/chat/completions" in tail


async def test_issue_33_pin_menu_defaults_to_a_safe_rung_never_the_one_that_crashed(
        tmp_path: Path) -> None:
    # At 3 a.m.: rung 0 (fast) just crashed and is barred; the menu offered "fast".
    service = stub(tmp_path, rung=0, engine_state="crashed", barred={0: 600.0})
    async with dashboard(service) as page:
        select = page.locator("#lever-mode")
        assert await select.input_value() == "medium"              # the next safer rung
        assert "barred" in await page.locator("#lever-mode option[value='fast']").inner_text()
        # medium is barred too: the next one down.
        service.st = status_of(service.policy, rung=0, engine_state="crashed",
                               barred={0: 600.0, 1: 300.0})
        await page.wait_for_function(
            "document.querySelector('#lever-mode').value === 'safe'", timeout=10_000)
        # The engine serves again on medium: pinning means "stay here".
        service.st = status_of(service.policy, rung=1, engine_state="ready")
        await page.wait_for_function(
            "document.querySelector('#lever-mode').value === 'medium'", timeout=10_000)
        # The operator's own pick stands across polls.
        await select.select_option("fast")
        service.st = status_of(service.policy, rung=1, engine_state="crashed")
        await page.wait_for_function(
            "document.querySelector('#lever-mode option').textContent.length > 0 && "
            "[...document.querySelectorAll('#lever-mode option')].some((o) => "
            "o.textContent.includes('engine crashed'))", timeout=10_000)
        assert await select.input_value() == "fast"


async def test_issue_33_a_hold_while_requests_are_held_is_a_warning_not_green(
        tmp_path: Path) -> None:
    from agent_supervisor.show.api.models import DecisionOut

    hold = DecisionOut(action="hold", rung=0, mode="fast", explanation="engine starting",
                       findings=[])
    gateway = {"url": "http://127.0.0.1:1/v1", "requests_in_flight": 0, "requests_queued": 3,
               "max_concurrency": 4, "held": True}
    service = stub(tmp_path, engine_state="starting", last_decision=hold, gateway=gateway)
    async with dashboard(service) as page:
        badge = page.locator("#decision .action")
        assert await badge.inner_text() == "holding requests: engine starting"
        warn = await badge.evaluate("(b) => getComputedStyle(b).backgroundColor")
        assert warn == "rgb(254, 243, 199)"                    # the warning colour
        assert "holding new requests until the engine serves" in \
            await page.locator("#meta").inner_text()
        # All well: a hold is "no change", and still not green.
        service.st = status_of(service.policy, engine_state="ready", last_decision=hold,
                               gateway={**gateway, "held": False})
        await text_of(page, "#decision .action", "hold: no change")
        colour = await badge.evaluate("(b) => getComputedStyle(b).backgroundColor")
        red, green, blue = (int(c) for c in colour[4:-1].split(", "))
        assert not (green > red + 20 and green > blue + 20), colour


async def test_issue_33_a_starting_engine_says_when_it_usually_serves(tmp_path: Path) -> None:
    from tests.helpers.admin_stub import add_run

    service = stub(tmp_path, engine_state="starting", engine_seconds_in_state=12.0)
    async with dashboard(service) as page:                 # no history: no estimate
        assert await page.locator("#engine").inner_text() == "engine starting for 12 s"
    service = stub(tmp_path / "2", engine_state="starting", engine_seconds_in_state=12.0)
    for n, seconds in enumerate([40.0, 44.0, 50.0]):
        add_run(service.store, run_id=f"fast-{n}", mode="fast", startup_seconds=seconds)
    add_run(service.store, run_id="safe-0", mode="safe", startup_seconds=9.0)
    add_run(service.store, run_id="fast-failed", mode="fast", startup_seconds=None)
    async with dashboard(service) as page:
        text = await text_of(page, "#engine", "usually")
        assert text == "engine starting for 12 s, usually ready in ~44 s"
        assert "median of the last 3 starts of fast" in \
            await page.locator("#engine").get_attribute("title")

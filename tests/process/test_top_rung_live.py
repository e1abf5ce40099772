"""Issue 32 item 2, live: ``supervisor run`` (the whole service in-process) with
``top_rung.enabled`` on the stand-in engine really restarts into the mode the traffic
chose and records it: the transition, the ``top_rung`` incident with its evidence, the
new engine run in that mode, and no switch back.

The stand-in serves a recorded vLLM 0.32.0 scrape (no running request, flat draft
counters), so the choice sees one request's load and no acceptance; the policy's
figures (made up for the test: nospec twice fast's tokens/s per request at every load,
one-second starts) make nospec the top that pays."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for

FIGURES = {"tokens_per_second": {"fast": {"code": [[1, 100], [6, 50]]},
                                 "nospec": {"code": [[1, 200], [6, 100]]}},
           "start_seconds": {"fast": 1, "nospec": 1}}


async def test_issue_32_live_supervisor_restarts_into_the_chosen_top(tmp_path: Path) -> None:
    policy = fake_engine_policy(
        tmp_path, modes=[{"name": "fast"}, {"name": "nospec"},
                         {"name": "safe", "args": {"--max-num-seqs": 1}}],
        sampling={"tick_seconds": 0.2, "probe_timeout_seconds": 1},
        top_rung={"enabled": True, "modes": ["fast", "nospec"], "sustain_seconds": 1,
                  "calm_max_requests": 8, "figures": FIGURES})
    store = Store.open(policy.database_url, fleet=policy.fleet)
    reader = Store.open(policy.database_url, fleet=policy.fleet)
    sup = Supervisor(policy, store)
    task = asyncio.create_task(sup.run())
    try:
        await wait_for(lambda: sup.ladder.state.top == 1 and sup.ladder.rung == 1
                       and sup.launcher.state is EngineState.READY, timeout=30,
                       what="the top switched to nospec and its engine ready")
        await asyncio.sleep(3)                       # no switch back on a steady load
        await sup.writer.flush()
        (tr,) = reader.transitions()
        assert (tr.from_mode, tr.to_mode, tr.actor) == ("fast", "nospec", "guard:top_rung")
        assert "top rung fast -> nospec (the traffic)" in tr.reason
        assert "predicted +100% tokens/s per request with nospec" in tr.reason
        assert "switch costs 1 s" in tr.reason
        (inc,) = [i for i in reader.incidents() if i.kind == "top_rung"]
        assert inc.action == "step_down" and inc.mode == "fast"
        ev = inc.findings[0]["evidence"]
        assert (ev["from_top"], ev["to_top"], ev["best"]) == ("fast", "nospec", "nospec")
        assert [r.mode for r in reader.runs()] == ["nospec", "fast"]
        assert sup.ticker.top.state is not None and sup.ticker.top.state.top == "nospec"
        assert len(sup.ticker.top.state.switches_s) == 1
    finally:
        sup.request_stop("test")
        assert await asyncio.wait_for(task, 20) == 0
        reader.close()

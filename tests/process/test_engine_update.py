"""Issue 29 item 5: a run on a new engine version compared with the last good run of the
previous one, end to end on real parts: the stand-in engine answering ``GET /version``
(as vLLM's ``show_version`` does) over real HTTP, the record on SQLite and PostgreSQL
(schema from the Alembic migrations, ``mode_baselines.engine_version``), ``GoodRuns``
writing the good run with its version, ``EngineUpdates`` reading the new run's version
and the last good run, ``decide()`` naming the regression (a warning on record, no
step), the product's own trace carrying it as an ``engine_update`` line and ``replay``
of that trace taking the same decision. Controls: the same version serving again gets
no comparison; a version as fast is quiet."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.guards.engine_update import busy_rate
from agent_supervisor.decide.ladder import LadderState, advance
from agent_supervisor.decide.replay import replay
from agent_supervisor.policy import Policy, PolicyHolder
from agent_supervisor.record.baselines import last_good_run
from agent_supervisor.record.records import AddBaseline
from agent_supervisor.record.store import Store
from agent_supervisor.record.trace import TraceWriter, read_trace
from agent_supervisor.runtime.good_runs import GoodRuns
from agent_supervisor.telemetry.window import Window
from tests.helpers.field_cases import FIELD, build_samples, load_case
from tests.helpers.paths import FAKE_ENGINE
from tests.helpers.ports import free_port
from tests.helpers.waiting import wait_for

CASE = FIELD / "spec_launch_lottery" / "usual_launch.yaml"
#: MTP k=5 accepting 0.60 / 0.45 / 0.33 / 0.24 / 0.18 by position, 3 running, 50 tokens/s.
GOOD = {"generation_tokens_total": 50, "prompt_tokens_total": 300,
        "iteration_tokens_count_total": 2, "spec_decode_num_drafts_total": 2,
        "spec_decode_num_draft_tokens_total": 10,
        "spec_decode_num_accepted_tokens_total": 3.6,
        "spec_decode_accepted_per_position_total": [1.2, 0.9, 0.66, 0.48, 0.36]}
#: The same mode after the update: position 0 at 0.30, half of the good run's 0.60.
WORSE = {**GOOD, "spec_decode_num_accepted_tokens_total": 1.5,
         "spec_decode_accepted_per_position_total": [0.6, 0.4, 0.24, 0.16, 0.1]}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    url = (f"sqlite:///{tmp_path / 'db.sqlite'}" if request.param == "sqlite"
           else request.getfixturevalue("pg_url"))
    s = Store.open(url, fleet="gb10", host="spark-1")
    yield s
    s.close()


class Writer:
    """The RecordWriter's two calls, straight to the real store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def submit(self, record: AddBaseline) -> None:
        self.store.apply(record)

    async def flush(self) -> None:
        pass


class Engine:
    """The stand-in engine on a free port, answering ``/version`` with ``version``."""

    def __init__(self, version: str, port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen([sys.executable, str(FAKE_ENGINE), "--port",
                                      str(self.port), "--version", version,
                                      "--ready-after", "0"])

    async def ready(self) -> None:
        async with httpx.AsyncClient() as c:
            for _ in range(200):
                try:
                    if (await c.get(f"http://127.0.0.1:{self.port}/version")).status_code \
                            == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.05)
        raise AssertionError("the stand-in engine never answered /version")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def policy_for(port: int) -> Policy:
    base = load_case(CASE).policy
    return base.model_copy(update={"engine": base.engine.model_copy(
        update={"host": "127.0.0.1", "port": port})})


async def serve(store: Store, port: int, version: str, run_id: str, rates: dict,
                seconds: float, trace: TraceWriter | None = None) -> list[Decision]:
    """One run of rung 0 on the stand-in engine answering ``version`` on ``port`` (the
    same for every run of a test: the port is part of the mode's arguments), ticked as
    live: the good-run watcher and the update comparison beside ``decide()``."""
    engine = Engine(version, port)
    try:
        await engine.ready()
        policy = policy_for(engine.port)
        window = Window(policy.sampling.window_seconds)
        runs = GoodRuns(PolicyHolder(policy), window, Writer(store), trace, learned=[].append)
        samples = build_samples([{"to_s": seconds, "dt_s": 5,
                                  "fields": {"engine_run_id": run_id, "requests_running": 3,
                                             "requests_waiting": 0}, "rates": rates}])
        window.append(samples[0])
        runs.update()                            # the run serves: read its version
        await wait_for(lambda: runs.updates.version(run_id) is not None, 10,
                       "the run's engine version")
        await asyncio.sleep(0.2)                 # the last good run's lookup (a thread)
        ladder, out = LadderState(rung=0, since_s=0.0), []
        for s in samples:
            if s is not samples[0]:
                window.append(s)
            if trace is not None:
                trace.sample(s)
            d = decide(window, ladder, policy, s.t_s, acceptance={}, update=runs.update())
            if trace is not None:
                trace.decision(s.t_s, d)
            runs.observe(d, 0, s.t_s)
            ladder = advance(ladder, d, policy, s.t_s)
            out.append(d)
        return out
    finally:
        engine.stop()


def regression(decisions: list[Decision]) -> list[Decision]:
    return [d for d in decisions if any(f.kind == "engine_update_regression"
                                        for f in d.findings)]


async def test_issue_29_an_update_that_lowers_acceptance_is_named(store: Store,
                                                                  tmp_path: Path) -> None:
    port = free_port()
    good = await serve(store, port, "0.31.0", "r1", GOOD, 1900)
    assert not regression(good)
    policy = policy_for(port)
    prev = last_good_run(store, policy, policy.modes[0])
    assert prev is not None and prev.version == "0.31.0"
    assert prev.acceptance_by_position == (0.6, 0.45, 0.33, 0.24, 0.18)
    assert prev.concurrency == 3 and prev.tokens_per_second_per_request == pytest.approx(
        50 / 3, rel=0.01)
    trace_path = tmp_path / "trace.jsonl"
    trace = TraceWriter(trace_path)
    trace.header(fleet="gb10", t0_s=0.0, baselines={})
    after = await serve(store, port, "0.32.0", "r2", WORSE, 900, trace)
    trace.close()
    named = regression(after)
    assert named, "no engine_update_regression after the update"
    first = named[0]
    assert all(d.action is Action.HOLD for d in after)      # no ladder walk, no restart
    f = next(f for f in first.findings if f.kind == "engine_update_regression")
    assert f.evidence["version"] == "0.32.0" and f.evidence["previous_version"] == "0.31.0"
    assert f.evidence["acceptance_by_position"][0] == pytest.approx(0.3)
    assert f.evidence["previous_acceptance_by_position"][0] == 0.6
    # The troubled run is no good run: the old version stays the comparison.
    assert last_good_run(store, policy, policy.modes[0]).version == "0.31.0"
    # The product's trace replays to the same decisions (its engine_update line).
    records = read_trace(trace_path, rungs=len(policy.modes))
    assert next(r for r in records if r["type"] == "engine_update")["version"] == "0.32.0"
    steps = replay(records, policy)
    assert [s.matches for s in steps] == [True] * len(steps)
    assert regression([s.decision for s in steps])
    # Without that line the same samples say nothing of an update.
    plain = [r for r in records if r["type"] != "engine_update"]
    assert not regression([s.decision for s in replay(plain, policy)])


async def test_issue_29_the_same_version_again_gets_no_comparison(store: Store) -> None:
    port = free_port()
    await serve(store, port, "0.31.0", "r1", GOOD, 1900)
    again = await serve(store, port, "0.31.0", "r2", WORSE, 900)   # a traffic mix, not an update
    assert not regression(again)


async def test_issue_29_an_update_as_fast_is_quiet(store: Store) -> None:
    port = free_port()
    await serve(store, port, "0.31.0", "r1", GOOD, 1900)
    after = await serve(store, port, "0.32.0", "r2", GOOD, 900)
    assert not regression(after)
    assert all(d.action is Action.HOLD for d in after)


def test_issue_29_busy_rate_leaves_idle_spells_out() -> None:
    samples = build_samples([
        {"to_s": 100, "dt_s": 5, "fields": {"requests_running": 2},
         "rates": {"generation_tokens_total": 40}},
        {"to_s": 200, "fields": {"requests_running": 0}, "rates": {"generation_tokens_total": 0}},
        {"to_s": 300, "fields": {"requests_running": 2}, "rates": {"generation_tokens_total": 40}}])
    rate, running, seconds = busy_rate(samples)
    assert rate == pytest.approx(20.0) and running == pytest.approx(2.0)
    assert seconds == pytest.approx(190, abs=10)

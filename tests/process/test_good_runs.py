"""Issue 13: acceptance baselines from past good runs, on a real database (SQLite, and
PostgreSQL at 127.0.0.1:5432 db ``test``), schema from the Alembic migrations: a run
healthy for ``good_run_seconds`` stores its acceptance by position (source ``run``), a
troubled one does not, and the launch lottery judges against the newest good runs."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime

import pytest

from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Finding, Severity
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.record.baselines import args_digest, load_acceptance
from agent_supervisor.record.records import AddBaseline
from agent_supervisor.record.store import Store
from agent_supervisor.runtime.good_runs import GoodRuns
from agent_supervisor.telemetry.window import Window
from tests.helpers.field_cases import FIELD, build_samples, first_action, load_case, play_case

LOTTERY = FIELD / "spec_launch_lottery" / "bad_launch.yaml"
#: A run at the MTP k=5 rung accepting 0.60 / 0.45 / 0.33 / 0.24 / 0.18 by position.
GOOD = [{"to_s": 1900, "dt_s": 2, "fields": {"requests_running": 3, "requests_waiting": 0},
         "rates": {"generation_tokens_total": 50, "prompt_tokens_total": 300,
                   "iteration_tokens_count_total": 2, "spec_decode_num_drafts_total": 2,
                   "spec_decode_num_draft_tokens_total": 10,
                   "spec_decode_num_accepted_tokens_total": 3.6,
                   "spec_decode_accepted_per_position_total": [1.2, 0.9, 0.66, 0.48, 0.36]}}]


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    url = (f"sqlite:///{tmp_path / 'db.sqlite'}" if request.param == "sqlite"
           else request.getfixturevalue("pg_url"))
    s = Store.open(url, fleet="gb10", host="spark-1")
    yield s
    s.close()


class Writer:
    """The RecordWriter's two calls, straight to the real store."""

    def __init__(self, store: Store) -> None:
        self.store, self.written = store, []

    def submit(self, record: AddBaseline) -> None:
        self.store.apply(record)
        self.written.append(record)

    async def flush(self) -> None:
        pass


def live(store: Store, warning_at_s: float | None = None,
         learned: list | None = None) -> list[AddBaseline]:
    """The good-run watcher over one run, as the tick calls it; rows go to ``store``."""
    case = load_case(LOTTERY)
    window = Window(case.policy.sampling.window_seconds)
    writer = Writer(store)
    written = writer.written
    runs = GoodRuns(PolicyHolder(case.policy), window, writer,
                    learned=(learned if learned is not None else []).append)
    for s in build_samples(GOOD):
        window.append(s)
        findings = ()
        if warning_at_s is not None and s.t_s == warning_at_s:
            findings = (Finding("preemption", "preemption_storm", Severity.WARNING, "storm",
                                {}, s.engine_run_id),)
        runs.observe(Decision(Action.HOLD, 0, "hold", findings), 0, s.t_s)
    return written


async def test_issue_13_a_good_run_stores_its_acceptance_once(store: Store) -> None:
    learned: list = []
    (row,) = live(store, learned=learned)
    for _ in range(200):                           # the reload runs in a thread
        if learned:
            break
        await asyncio.sleep(0.05)
    assert learned == [{"nvfp4-mtp5": (0.6, 0.45, 0.33, 0.24, 0.18)}]
    assert row.source == "run" and row.mode == "nvfp4-mtp5" and row.concurrency == 3
    assert row.measured_at <= datetime.now(UTC)
    case = load_case(LOTTERY)
    assert load_acceptance(store, case.policy) == {"nvfp4-mtp5": (0.6, 0.45, 0.33, 0.24, 0.18)}
    (stored,) = store.run_baselines()
    assert stored.source == "run" and stored.args_digest == args_digest(
        case.policy, case.policy.modes[0])
    assert store.baselines() == []                 # not a calibration row


def test_issue_13_a_troubled_run_stores_nothing(store: Store) -> None:
    assert live(store, warning_at_s=100.0) == []
    assert store.run_baselines() == []


def run_row(mode: str, digest: str, pos: list[float]) -> AddBaseline:
    return AddBaseline(mode=mode, args_digest=digest, concurrency=3,
                       measured_at=datetime.now(UTC), tokens_per_second_per_request=20.0,
                       tokens_per_second_total=60.0, ttft_seconds=None,
                       acceptance_by_position=pos, peak_rss_bytes=None,
                       mem_available_min_bytes=None, seconds=1800.0, requests=0,
                       source="run")


def test_issue_13_the_lottery_judges_against_the_newest_good_runs(store: Store) -> None:
    case = load_case(LOTTERY)
    mode = case.policy.modes[0]
    digest = args_digest(case.policy, mode)
    store.add_baseline(mode=mode.name, args_digest=digest, concurrency=1,
                       measured_at=datetime.now(UTC), tokens_per_second_per_request=30.0,
                       tokens_per_second_total=30.0, ttft_seconds=0.2,
                       acceptance_by_position=[0.77, 0.6, 0.45, 0.33, 0.25],
                       peak_rss_bytes=None, mem_available_min_bytes=None, seconds=20.0,
                       requests=10)
    # Calibration alone: position 0 at 0.44 against 0.77 is a bad launch.
    acceptance = load_acceptance(store, case.policy)
    assert acceptance[mode.name][0] == 0.77
    _, d = first_action(play_case(dataclasses.replace(case, acceptance=acceptance)))
    assert d.action is Action.PLANNED_RESTART
    # The fleet's own good runs accept less (long agent prompts): an old one, ignored,
    # three newer ones averaged, one of another build ignored.
    for pos in ([0.9] * 5, [0.52, 0.4, 0.3, 0.2, 0.1], [0.5, 0.4, 0.3, 0.2, 0.1],
                [0.48, 0.4, 0.3, 0.2, 0.1]):
        store.apply(run_row(mode.name, digest, pos))
    store.apply(run_row(mode.name, "another-build", [0.99] * 5))
    acceptance = load_acceptance(store, case.policy)
    assert acceptance[mode.name] == (0.5, 0.4, 0.3, 0.2, 0.1)
    # 0.44 against a usual 0.50 is this fleet's normal launch: no restart.
    steps = play_case(dataclasses.replace(case, acceptance=acceptance))
    assert all(d.action is Action.HOLD for _, d in steps)
    assert not any(f.kind == "spec_launch_lottery" for _, d in steps for f in d.findings)

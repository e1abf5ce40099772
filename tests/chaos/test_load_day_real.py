"""Issue 32 item 3 on the real CPU engine: ``supervisor bench --load-day --short`` (three
arms, 20 s phases of 1, 6 and 2 agents, about 5 minutes with the start-ups): every arm
delivers tokens in every phase, the report has the oracle and each ratio, and no process
is left. A smoke of the harness, not of its figures (no switch pays in 20 s phases); the
measured day is ``supervisor bench --load-day`` (docs/figures.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_supervisor.chaos.day_load import LOAD_ARMS, main_load_day

pytestmark = pytest.mark.long


def test_issue_32_short_load_day_runs_three_arms(tmp_path: Path) -> None:
    lines: list[str] = []
    assert main_load_day(short=True, base=tmp_path, emit=lines.append) == 0
    print("\n".join(lines))
    (path,) = tmp_path.glob("load-day-short-seed1.json")
    report = json.loads(path.read_text())
    assert list(report["day_tokens"]) == list(LOAD_ARMS)
    for row in report["phases"]:
        assert all(v > 0 for v in row["tokens_per_second"].values()), row
        assert row["oracle_arm"] in ("always-fast", "always-plain")
    assert set(report["supervised_over_fixed"]) == {"always-fast", "always-plain"}

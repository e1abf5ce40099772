"""Issue 32 item 3: the load day's report arithmetic (``chaos/day_load.py``), on arm
results written by hand (filler figures, not a measurement: the real day runs under
``supervisor bench --load-day``, docs/figures.md), and its policy."""

from __future__ import annotations

import pytest
import yaml

from agent_supervisor.chaos.day_load import (
    LoadPhase,
    format_load_table,
    full_load_day,
    load_policy_overrides,
    load_report,
    phase_tokens,
    short_load_day,
)
from agent_supervisor.chaos.harness import chaos_policy
from agent_supervisor.decide.top_switch import top_figures
from agent_supervisor.load.agents import RequestRecord
from agent_supervisor.policy import load_policy

PHASES = (LoadPhase("1 agent", 100, 1, "code"), LoadPhase("6 agents", 200, 6, "code"),
          LoadPhase("2 agents", 100, 2, "long"))


def arm(*tokens: float) -> list[dict[str, float]]:
    return [{"tokens": t, "requests": 1.0, "failed": 0.0, "seconds": p.seconds}
            for t, p in zip(tokens, PHASES, strict=True)]


def test_issue_32_oracle_is_the_best_fixed_arm_per_phase() -> None:
    # fast wins alone and at two; plain wins at six; supervised switches in between.
    rep = load_report({"always-fast": arm(28000, 80000, 20000),
                       "always-plain": arm(14000, 120000, 13000),
                       "supervised": arm(27000, 110000, 19500)}, PHASES)
    assert [r["oracle_arm"] for r in rep["phases"]] == ["always-fast", "always-plain",
                                                         "always-fast"]
    assert [r["oracle_tokens_per_second"] for r in rep["phases"]] == [280.0, 600.0, 200.0]
    assert [r["ratio_to_oracle"]["supervised"] for r in rep["phases"]] == [
        0.964, 0.917, 0.975]
    assert rep["oracle_day_tokens"] == 168000
    assert rep["day_ratio_to_oracle"] == {"always-fast": 0.762, "always-plain": 0.875,
                                          "supervised": 0.932}
    assert rep["supervised_over_fixed"] == {"always-fast": 1.223, "always-plain": 1.065}
    assert rep["acceptance"] == {"supervised_ge_0.95_oracle_each_phase": False,
                                 "supervised_ge_0.95_oracle_day": False,
                                 "supervised_ge_1.1_each_fixed_day": False}
    table = format_load_table(rep)
    assert "6 agents" in table and "0.92" in table and "always-plain 1.06" in table


def test_issue_32_a_supervised_arm_at_the_oracle_meets_every_target() -> None:
    rep = load_report({"always-fast": arm(28000, 80000, 20000),
                       "always-plain": arm(14000, 120000, 13000),
                       "supervised": arm(28000, 118000, 20000)}, PHASES)
    assert all(rep["acceptance"].values()), rep["acceptance"]


def test_issue_32_phase_tokens_counts_requests_by_when_they_ended() -> None:
    recs = [RequestRecord(10.0, 0.1, 5.0, 64, 100, True),      # ends 15: phase 1
            RequestRecord(98.0, 0.1, 4.0, 64, 100, True),      # ends 102: phase 2
            RequestRecord(150.0, None, 1.0, 0, 100, False, "503"),
            RequestRecord(390.0, 0.1, 20.0, 64, 100, True)]    # ends 410: after the day
    got = phase_tokens(recs, PHASES, [0.0, 100.0, 300.0])
    assert [g["tokens"] for g in got] == [64.0, 64.0, 0.0]
    assert [g["failed"] for g in got] == [0.0, 1.0, 0.0]


@pytest.mark.parametrize("phases", [full_load_day(), short_load_day()])
def test_issue_32_the_load_days_policy_turns_the_top_rung_on(tmp_path, phases) -> None:
    data = chaos_policy(tmp_path, **load_policy_overrides(phases))
    policy = load_policy(yaml.safe_dump(data, sort_keys=False))
    figs = top_figures(policy, None)
    assert figs is not None and sorted(figs.tokens_per_second) == ["fast", "nospec"]
    assert [p.sessions for p in phases] == [1, 6, 2]
    assert sum(p.seconds for p in full_load_day()) <= 420

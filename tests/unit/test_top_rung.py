"""Issue 32 item 2 (the pure part): the top rung chosen by the traffic, replayed.

Figures: DSpark 51.5 against MTP 34.5 tokens/s on code, MTP 24.1 against DSpark 18.3 on
long essays, one request, the same NVFP4 weights on a GB10 (issue 13's field report, quoted
in agent_supervisor/load/profiles.py). Made up (filler): the figures at 4 and 8 requests,
the no-speculation rung's, the acceptances at position 0 per profile and the start times.
"""

from __future__ import annotations

import random
from itertools import pairwise

import pytest

from agent_supervisor.decide.top_rung import (
    TopRungFigures,
    TopRungState,
    choose_top_rung,
    predict,
    traffic_of,
)
from agent_supervisor.policy.speculative import TopRungSpec
from tests.helpers.top_rung import (
    FIGURES,
    RULES,
    TICK,
    World,
    jittered_load,
    replay,
    switches,
)


@pytest.mark.parametrize("seed", range(8))
def test_issue_32_steady_mix_under_jitter_switches_once_and_never_back(seed: int) -> None:
    # 70% code all day (DSpark's ground), MTP on top at first: one switch, then none.
    choices = replay(seed, 3.0, lambda _t: 0.7, jittered_load)
    moves = switches(choices)
    assert [m for _, m in moves] == ["dspark"], moves
    t, _ = moves[0]
    assert RULES.sustain_seconds <= t <= RULES.sustain_seconds + 900
    why = next(c for tt, c in choices if tt == t).why  # type: ignore[attr-defined]
    assert "code share" in why and "mtp accepts" in why and "switch costs 35 s" in why


@pytest.mark.parametrize("seed", range(4))
def test_issue_32_a_mix_inside_the_margin_never_switches(seed: int) -> None:
    # 25% code: DSpark and MTP predicted within 1% of each other; neither ever leaves.
    share = 0.25
    d = predict(FIGURES, "dspark", [("code", share), ("long_form", 1 - share)], 2.5)
    m = predict(FIGURES, "mtp", [("code", share), ("long_form", 1 - share)], 2.5)
    assert d is not None and m is not None and abs(d / m - 1) < RULES.margin_ratio
    for top in ("mtp", "dspark"):
        assert switches(replay(seed, 2.0, lambda _t: share, jittered_load, top=top)) == []


def test_issue_32_a_shift_to_long_form_switches_at_a_calm_moment() -> None:
    # Code until 1 h, long essays after; the load is busy (4 running, 1 waiting) until
    # 1 h 20 min, calm after: the switch to MTP waits for the calm.
    def load(_rng: random.Random, t: float) -> tuple[float, float]:
        return (4.0, 1.0) if t < 4800 else (1.0, 0.0)

    choices = replay(1, 2.0, lambda t: 0.9 if t < 3600 else 0.05, load, top="dspark")
    assert switches(choices) == [(4800.0, "mtp")]
    waits = [t for t, c in choices if c.action == "wait_calm"]  # type: ignore[attr-defined]
    assert waits and min(waits) >= 3600 + RULES.sustain_seconds and max(waits) < 4800
    why = dict(choices)[4800.0].why  # type: ignore[attr-defined]
    assert "long_form share" in why and "dspark accepts" in why


def test_issue_32_the_restart_must_pay_and_the_bound_holds() -> None:
    # A start of 2,000 s is not paid by +30% over a horizon of 1,800 s: never switch.
    slow = TopRungFigures(FIGURES.tokens_per_second, FIGURES.acceptance,
                          {**FIGURES.start_seconds, "dspark": 2000.0})
    world = World(0)
    state = TopRungState(top="mtp")
    seen = set()
    for i in range(int(3 * 3600 / TICK)):
        t = i * TICK
        world.tick(t, state.top, 0.7, 1.0)
        state, choice = choose_top_rung(state, world.window, state.top, slow, RULES, t)
        seen.add(choice.why.split(" for ")[-1] if "does not pay" in choice.why else "")
        assert choice.action != "switch"
    assert "1800 s does not pay a 2000 s restart yet" in seen
    # No start time measured: no switch either.
    unknown = TopRungFigures(FIGURES.tokens_per_second, FIGURES.acceptance, {})
    state = TopRungState(top="mtp")
    end = 3 * 3600 - TICK
    state, choice = choose_top_rung(state, world.window, "mtp", unknown, RULES, end - 600)
    state, choice = choose_top_rung(state, world.window, "mtp", unknown, RULES, end)
    assert choice.action == "hold" and "start time of dspark not measured" in choice.why


def test_issue_32_mix_flipping_every_ten_minutes_stays_under_the_bound() -> None:
    rules = TopRungSpec(max_switches_per_hour=1, sustain_seconds=120)
    choices = replay(3, 4.0, lambda t: 0.95 if int(t // 600) % 2 else 0.0,
                     lambda _r, _t: (1.0, 0.0), top="mtp", rules=rules)
    times = [t for t, _ in switches(choices)]
    assert len(times) >= 3           # it does follow the traffic ...
    for t in times:                  # ... never more than once in any hour
        assert sum(t <= u < t + 3600 for u in times) <= 1


def test_issue_32_evidence_of_the_window() -> None:
    world = World(0)
    for i in range(61):
        world.tick(i * TICK, "dspark", 0.5, 3.0, jitter=0.0)
    traffic = traffic_of(world.window, 300.0, 300.0)
    assert traffic.acceptance_pos0 == pytest.approx(0.5 * 0.80 + 0.5 * 0.35)
    assert traffic.requests_running == 3.0
    assert traffic.repeated_prefix_ratio == pytest.approx(0.5, abs=0.01)
    # Without speculation there is no acceptance: None, not 0.
    plain = World(0)
    for i in range(61):
        plain.tick(i * TICK, "nospec", 0.5, 3.0)
    assert traffic_of(plain.window, 300.0, 300.0).acceptance_pos0 is None


def test_issue_32_the_rules_are_a_policy_section() -> None:
    from agent_supervisor.errors import PolicyError
    from agent_supervisor.policy import load_policy
    text = ("fleet: t\nengine: {executable: vllm}\nmodes: [{name: mtp}, {name: dspark}]\n"
            "top_rung: {max_switches_per_hour: 1, sustain_seconds: 120}\n")
    policy = load_policy(text)
    assert policy.top_rung.max_switches_per_hour == 1
    choices = replay(3, 4.0, lambda t: 0.95 if int(t // 600) % 2 else 0.0,
                     lambda _r, _t: (1.0, 0.0), top="mtp", rules=policy.top_rung)
    times = [t for t, _ in switches(choices)]
    assert times and all(b - a >= 3600 for a, b in pairwise(times))
    with pytest.raises(PolicyError, match=r"top_rung\.max_switches_per_hour"):
        load_policy(text.replace("max_switches_per_hour: 1", "max_switches_per_hour: 0"))


def test_issue_32_figures_from_the_store(tmp_path) -> None:
    # Calibration rows per profile and recorded starts become the choice's figures.
    from datetime import UTC, datetime, timedelta

    from agent_supervisor.policy import load_policy
    from agent_supervisor.record.baselines import args_digest, load_top_rung_figures
    from agent_supervisor.record.records import AddRun, UpdateRun
    from agent_supervisor.record.store import Store, make_engine, upgrade
    policy = load_policy(
        "fleet: t\nengine: {executable: vllm}\nmodes:\n"
        "  - {name: dspark, args: {--speculative-config: {method: mtp, "
        "num_speculative_tokens: 3}}}\n  - {name: mtp, args: {--speculative-config: "
        "{method: mtp, num_speculative_tokens: 2}}}\n")
    engine = make_engine(f"sqlite:///{tmp_path}/s.db")
    upgrade(engine)
    store = Store(engine, fleet="t", host="h")
    now = datetime.now(UTC)
    for mode in policy.modes:
        for profile, conc, rate, acc in (("code", 1, 51.5, 0.82), ("code", 4, 40.0, 0.78),
                                         ("long_form", 1, 18.3, 0.35)):
            store.add_baseline(mode=mode.name, args_digest=args_digest(policy, mode),
                               concurrency=conc, measured_at=now,
                               tokens_per_second_per_request=rate,
                               tokens_per_second_total=rate * conc, ttft_seconds=None,
                               acceptance_by_position=[acc, acc / 2], peak_rss_bytes=None,
                               mem_available_min_bytes=None, seconds=20.0, requests=10,
                               profile=profile)
    store.add_baseline(mode="dspark", args_digest="another-build", concurrency=8,
                       measured_at=now, tokens_per_second_per_request=1.0,
                       tokens_per_second_total=8.0, ttft_seconds=None,
                       acceptance_by_position=[0.1], peak_rss_bytes=None,
                       mem_available_min_bytes=None, seconds=20.0, requests=1,
                       profile="code")
    for i, seconds in enumerate((30.0, 40.0, 36.0)):
        store.apply(AddRun(run_id=f"r{i}", mode="dspark", rung=0, argv=[], pid=1, port=1,
                           log_path="", started_at=now))
        store.apply(UpdateRun(run_id=f"r{i}", values={
            "ready_at": now + timedelta(seconds=seconds), "startup_seconds": seconds}))
    figures = load_top_rung_figures(store, policy)
    assert figures.tokens_per_second["dspark"] == {"code": [(1.0, 51.5), (4.0, 40.0)],
                                                   "long_form": [(1.0, 18.3)]}
    assert figures.acceptance["dspark"]["code"] == pytest.approx(0.80)
    assert figures.start_seconds == {"dspark": 36.0}
    assert figures.profiles == ("code", "long_form")


def test_issue_32_replay_top_rung_over_a_recorded_trace(tmp_path, capsys) -> None:
    # The recorded CPU-demo trace (tests/fixtures/traces: the untrained MTP layer, mtp2,
    # then 16 streams): with calibration saying nospec is faster on the profile whose MTP
    # acceptance is lowest (values made up), the choice puts nospec on top once its lead
    # has held 20 s, at a calm moment of the trace.
    from datetime import UTC, datetime, timedelta

    import yaml

    from agent_supervisor.cli import main
    from agent_supervisor.policy import load_policy_file
    from agent_supervisor.record.baselines import args_digest
    from agent_supervisor.record.records import AddRun, UpdateRun
    from agent_supervisor.record.store import Store, make_engine, upgrade
    from tests.helpers.paths import ROOT
    fixtures = ROOT / "tests" / "fixtures" / "traces"
    data = yaml.safe_load((fixtures / "cpu-demo-spec-slower.policy.yaml").read_text())
    data["storage"] = {"state_directory": str(tmp_path)}
    data["top_rung"] = {"sustain_seconds": 20}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    policy = load_policy_file(path)
    engine = make_engine(policy.database_url)
    upgrade(engine)
    store = Store(engine, fleet=policy.fleet)
    now = datetime.now(UTC)
    rows = {"mtp2": {"code": (300.0, 0.40), "long_form": (150.0, 0.01)},
            "nospec": {"code": (590.0, None), "long_form": (600.0, None)}}
    for name, per in rows.items():
        mode = policy.modes[policy.mode_index(name)]
        for profile, (rate, acc) in per.items():
            store.add_baseline(mode=name, args_digest=args_digest(policy, mode),
                               concurrency=4, measured_at=now,
                               tokens_per_second_per_request=rate,
                               tokens_per_second_total=4 * rate, ttft_seconds=None,
                               acceptance_by_position=None if acc is None else [acc, acc],
                               peak_rss_bytes=None, mem_available_min_bytes=None,
                               seconds=10.0, requests=10, profile=profile)
    store.apply(AddRun(run_id="r", mode="nospec", rung=2, argv=[], pid=1, port=1,
                       log_path="", started_at=now))
    store.apply(UpdateRun(run_id="r", values={"ready_at": now + timedelta(seconds=20),
                                             "startup_seconds": 20.0}))
    store.close()
    code = main(["replay", str(fixtures / "cpu-demo-spec-slower.trace.jsonl"), "--policy",
                 str(path), "--top-rung"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = [line.split(None, 3) for line in out.splitlines()[:-1]]
    assert [(a, t) for _, a, t, _ in lines] == [("switch", "nospec")], out
    why = lines[0][3]
    assert why.startswith("long_form share 100%, mtp2 accepts 0.0"), why
    assert "with nospec for 20 s, switch costs 20 s" in why, why
    assert "1 switches" in out.splitlines()[-1]


def test_issue_32_replay_reads_the_policys_own_figures(tmp_path, capsys) -> None:
    # The figures the live choice reads: the policy's top_rung.figures where the database
    # has none (the load day's supervised arm runs on those). The replay read the
    # database alone and said "figures for no mode, 0 switches" over the load day's trace
    # (2026-12-04); with the same figures as the test above written in the policy, the
    # same switch to nospec.
    import yaml

    from agent_supervisor.cli import main
    from tests.helpers.paths import ROOT
    fixtures = ROOT / "tests" / "fixtures" / "traces"
    data = yaml.safe_load((fixtures / "cpu-demo-spec-slower.policy.yaml").read_text())
    data["storage"] = {"state_directory": str(tmp_path)}
    data["top_rung"] = {"sustain_seconds": 20, "figures": {
        "tokens_per_second": {"mtp2": {"code": [[4, 300]], "long_form": [[4, 150]]},
                              "nospec": {"code": [[4, 590]], "long_form": [[4, 600]]}},
        "acceptance": {"mtp2": {"code": 0.40, "long_form": 0.01}},
        "start_seconds": {"mtp2": 20, "nospec": 20}}}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    code = main(["replay", str(fixtures / "cpu-demo-spec-slower.trace.jsonl"), "--policy",
                 str(path), "--top-rung"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "figures for ['mtp2', 'nospec']" in out.splitlines()[-1], out
    lines = [line.split(None, 3) for line in out.splitlines()[:-1]]
    assert [(a, t) for _, a, t, _ in lines] == [("switch", "nospec")], out

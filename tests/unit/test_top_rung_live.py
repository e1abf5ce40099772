"""Issue 32 item 2, live: the top rung chosen by the traffic moves the ladder.

Closed-loop replays (tests/helpers/top_rung_live.py: decide() with the choice each tick,
an engine that restarts in the mode it is put in, on this box's n-gram figures): the
issue's acceptance (stable under jitter, never more switches than the bound), a switch at
the load that pays, and every step above it still winning.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.findings import Severity
from agent_supervisor.decide.ladder import LadderState, advance, reloaded
from agent_supervisor.decide.top_rung import TopRungChoice, TopRungFigures, TopRungState
from agent_supervisor.decide.top_switch import TOP_KIND, settle, top_figures
from agent_supervisor.errors import PolicyError
from agent_supervisor.policy import load_policy
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window
from tests.helpers.top_rung_live import Loop, live_policy

HOUR = 3600.0


def steady(running: float, code: float):
    def phase(rng: random.Random, _t: float) -> tuple[float, float]:
        return max(0.0, round(rng.gauss(running, 0.8))), code
    return phase


def test_issue_32_six_agents_switch_the_top_to_plain_once_with_the_evidence() -> None:
    loop = Loop(live_policy(), steady(6, 0.8)).run_for(1800)
    assert loop.switches[0][1] == "nospec" and len(loop.switches) == 1, loop.switches
    t, d = next((t, d) for t, d in loop.decisions if d.top_rung is not None)
    assert d.action is Action.STEP_DOWN and d.rung == 1
    assert d.findings[0].kind == TOP_KIND and d.findings[0].severity is Severity.INFO
    assert "fast accepts" in d.explanation and "switch costs 25 s" in d.explanation
    assert "predicted +" in d.explanation and "top rung fast -> nospec" in d.explanation
    assert loop.ladder.top == 1 and loop.serving_rungs[-1] == 1
    # Never climbs back above the chosen top: the calm step up stops at nospec.
    assert all(d.action is not Action.STEP_UP for tt, d in loop.decisions if tt > t)


@pytest.mark.parametrize("seed", range(3))
def test_issue_32_steady_mix_under_jitter_never_switches_back(seed: int) -> None:
    # Two agents on code: n-gram leads by ~48%; from fast it stays, from nospec it goes
    # once, and jitter never flips it back.
    for start_top in (0, 1):
        loop = Loop(live_policy(), steady(2, 0.8), seed=seed)
        loop.ladder = dataclasses.replace(loop.ladder, top=start_top, rung=start_top)
        loop.engine_rung = start_top
        loop.run_for(HOUR)
        assert [m for _, m in loop.switches] == ([] if start_top == 0 else ["fast"])


@pytest.mark.parametrize("seed", range(3))
def test_issue_32_load_that_flips_every_few_minutes_stays_within_the_bound(seed: int) -> None:
    # 1 agent / 6 agents alternating every 4 min for 2.5 h: each phase alone would pay a
    # switch; the bound (2 an hour here) caps them in every hour.
    def flipping(rng: random.Random, t: float) -> tuple[float, float]:
        return (1.0 if int(t // 240) % 2 == 0 else 6.0) + rng.choice((0, 0, 1)), 0.8
    loop = Loop(live_policy(max_switches_per_hour=2), flipping, seed=seed).run_for(2.5 * HOUR)
    times = [t for t, _ in loop.switches]
    assert times, "the load pays for some switch"
    for t in times:
        assert sum(t <= u < t + HOUR for u in times) <= 2, times


def test_issue_32_off_by_default_and_off_means_no_choice() -> None:
    policy = load_policy("fleet: t\nengine: {executable: vllm}\nmodes: [{name: a}]\n")
    assert policy.top_rung.enabled is False and top_figures(policy, None) is None


def test_issue_32_policy_names_unknown_modes() -> None:
    with pytest.raises(PolicyError, match="top_rung: ghost not one of the modes"):
        live_policy("[fast, ghost]")


def test_issue_32_the_database_figures_win_mode_by_mode() -> None:
    policy = live_policy()
    stored = TopRungFigures({"fast": {"code": ((1.0, 500.0),)}}, {}, {"nospec": 40.0})
    figs = top_figures(policy, stored)
    assert figs is not None
    assert figs.tokens_per_second["fast"] == {"code": ((1.0, 500.0),)}
    assert figs.tokens_per_second["nospec"]["prose"][0] == (1.0, 144.0)
    assert figs.start_seconds == {"fast": 30.0, "nospec": 40.0}
    assert "safe" not in figs.tokens_per_second


SWITCH = TopRungChoice("switch", "nospec", "prose share 100%, predicted +40% tokens/s per "
                       "request with nospec for 2 min, switch costs 25 s")


def ready(t: float, rung: int = 0) -> Sample:
    return Sample(t_s=t, engine_state=EngineState.READY, engine_state_since_s=t - 100,
                  engine_run_id="r1", engine_rung=rung, engine_core_alive=True,
                  health_status=200, requests_running=2, requests_waiting=0)


def test_issue_32_steps_above_the_switch_win() -> None:
    policy = live_policy()
    at_top = LadderState(0, since_s=0.0)
    window = Window.of([ready(500)])
    d = decide(window, at_top, policy, 500, top=SWITCH)
    assert (d.action, d.rung, d.top_rung) == (Action.STEP_DOWN, 1, 1)
    # A crashed engine restarts first; a stopped one starts; the operator's pin holds.
    crashed = Sample(t_s=500, engine_state=EngineState.CRASHED, engine_state_since_s=500,
                     engine_run_id="r1", engine_rung=0, engine_crash_reason="exited",
                     engine_exit_code=1)
    assert decide(Window.of([crashed]), at_top, policy, 500, top=SWITCH).top_rung is None
    stopped = Sample(t_s=500, engine_state=EngineState.STOPPED, engine_state_since_s=500)
    assert decide(Window.of([stopped]), at_top, policy, 500, top=SWITCH).action is Action.START
    for held in (dataclasses.replace(at_top, pinned=0), dataclasses.replace(at_top, paused=True),
                 dataclasses.replace(at_top, probation_until_s=600.0),
                 dataclasses.replace(at_top, last_change_s=490.0),
                 dataclasses.replace(at_top, failing=((1, 900.0, 300.0),))):
        assert decide(window, held, policy, 500, top=SWITCH).top_rung is None, held


def test_issue_32_below_both_tops_only_the_top_moves_and_the_climb_stops_there() -> None:
    policy = live_policy()
    low = LadderState(2, since_s=0.0)              # on safe after a safety step down
    window = Window.of([ready(500, rung=2)])
    d = decide(window, low, policy, 500, top=SWITCH)
    assert (d.action, d.rung, d.top_rung) == (Action.HOLD, 2, 1)
    low = advance(low, d, policy, 500)
    assert low.top == 1
    up = decide(Window.of([ready(700, rung=2)]), low, policy, 700)
    assert (up.action, up.rung) == (Action.STEP_UP, 1)
    on_top = advance(low, up, policy, 700)
    on_top = dataclasses.replace(on_top, probation_pending_since_s=None, probation_until_s=None)
    assert decide(Window.of([ready(900, rung=1)]), on_top, policy, 900).action is Action.HOLD


def test_issue_32_a_switch_not_carried_out_is_asked_again_and_not_counted() -> None:
    policy = live_policy()
    before = TopRungState(top="fast", candidate="nospec", candidate_since_s=0.0)
    after = TopRungState(top="nospec", switches_s=(100.0,))
    held = decide(Window.of([ready(100)]), LadderState(0, last_change_s=95.0), policy, 100,
                  top=SWITCH)
    kept = settle(before, after, SWITCH, held, policy)
    assert kept.top == "fast" and kept.switches_s == () and kept.candidate == "nospec"
    assert settle(before, after, SWITCH, None, policy).top == "fast"
    took = decide(Window.of([ready(100)]), LadderState(0), policy, 100, top=SWITCH)
    assert settle(before, after, SWITCH, took, policy).switches_s == (100.0,)


def test_issue_32_a_reload_carries_the_top_by_name() -> None:
    old = live_policy()
    new = load_policy("fleet: t\nengine: {executable: vllm}\n"
                      "modes: [{name: extra}, {name: fast}, {name: nospec}]\n")
    _, extras = reloaded(LadderState(1, top=1), old, new)
    assert extras["top"] == 2
    gone = load_policy("fleet: t\nengine: {executable: vllm}\nmodes: [{name: fast}]\n")
    assert reloaded(LadderState(1, top=1), old, gone)[1]["top"] == 0

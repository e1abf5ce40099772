"""Issue 29: the creep check under noise near the floor.

MemAvailable flat a little above the creep floor (12 GiB on the base GB10 policy: twice
the 6 GiB emergency floor) read with up to 2 % noise per sample must stay quiet: before
the check asked for a significant slope (``memory_forecast.CREEP_MIN_T``) a plain
least-squares fit over such noise reached the creep floor within the 6 h horizon on
some ticks and asked for a planned restart. The positive cases still fire: ollama
#18106's 1.7 GiB/h leak from 20 GiB, under the same noise, and noise-free (the field
case ``memory_creep/leak_per_request_gb10``)."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.ladder import advance
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window
from tests.helpers.field_cases import FIELD, build_samples, first_action, load_case, play_case

GiB = 2**30
CASE = load_case(FIELD / "memory_creep" / "leak_per_request_gb10.yaml")
POLICY = CASE.policy
CREEP_FLOOR = 2 * POLICY.guards.memory_floor.min_available_bytes
CREEP_KINDS = {"memory_creep", "memory_trend"}


def run(level: float, per_second: float, noise: float, dt: float, seed: int,
        seconds: float = 1800) -> list[Decision]:
    """``decide()`` after every sample of one READY run: MemAvailable ``level`` bytes
    falling ``per_second`` bytes/s, each reading off by up to ``noise`` of itself."""
    rng = random.Random(seed)
    samples: list[Sample] = build_samples([{
        "to_s": seconds, "dt_s": dt,
        "fields": {"mem_total_bytes": 130594717696, "mem_available_bytes": level,
                   "requests_running": 6, "requests_waiting": 0},
        "rates": {"generation_tokens_total": 120, "prompt_tokens_total": 900,
                  "iteration_tokens_count_total": 15, "mem_available_bytes": -per_second}}])
    window, ladder, out = Window(POLICY.sampling.window_seconds), CASE.ladder, []
    for s in samples:
        noisy = dataclasses.replace(s, mem_available_bytes=s.mem_available_bytes
                                    * (1 + rng.uniform(-noise, noise)))
        window.append(noisy)
        d = decide(window, ladder, POLICY, s.t_s)
        ladder = advance(ladder, d, POLICY, s.t_s)
        out.append(d)
    return out


def creep(decisions: list[Decision]) -> list[Decision]:
    return [d for d in decisions if any(f.kind in CREEP_KINDS for f in d.findings)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(above=st.floats(0.5, 3.0), noise=st.floats(0.005, 0.02), dt=st.sampled_from([2, 5]),
       seed=st.integers(0, 2**32 - 1))
def test_issue_29_flat_memory_near_the_creep_floor_stays_quiet(above: float, noise: float,
                                                               dt: int, seed: int) -> None:
    decisions = run(CREEP_FLOOR + above * GiB, 0.0, noise, dt, seed)
    noisy = creep(decisions)
    assert not noisy, f"{noisy[0].explanation} ({noisy[0].findings[0].evidence})"
    assert all(d.action is Action.HOLD for d in decisions)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(noise=st.floats(0.0, 0.02), seed=st.integers(0, 2**32 - 1))
def test_issue_29_a_real_creep_still_fires_under_noise(noise: float, seed: int) -> None:
    decisions = run(20 * GiB, 506_000, noise, 5, seed)          # 1.7 GiB/h, ollama #18106
    found = [f for d in decisions for f in d.findings if f.kind == "memory_creep"]
    assert found and str(found[0].response) == "restart_when_calm"   # 6 running: not calm


def test_issue_29_the_field_case_still_fires_on_time() -> None:
    t, d = first_action(play_case(CASE))
    assert d.action is Action.PLANNED_RESTART and 1200 <= t <= 1210
    assert any(f.kind == "memory_creep" for f in d.findings)


def test_issue_29_noise_near_the_floor_fired_before_the_significance_bound(
        monkeypatch) -> None:
    """The case the property test found, with the bound off: it fires (5 of seeds 0-9
    fired with no bound, 3 with t >= 2, 1 with t >= 3, none with 4; so the quiet property
    above is a real check, not one that cannot fail)."""
    from agent_supervisor.decide.guards import memory_forecast
    monkeypatch.setattr(memory_forecast, "CREEP_MIN_T", 0.0)
    fired = next((seed for seed in range(20)
                  if creep(run(CREEP_FLOOR + 2 * GiB, 0.0, 0.02, 5, seed))), None)
    assert fired is not None, "2 % noise 2 GiB above the creep floor never fired unbound"

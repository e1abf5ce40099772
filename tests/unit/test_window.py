"""Window arithmetic: counter increases across engine restarts, rates, streaks, and the
speculative-decoding ratios derived from them."""

from __future__ import annotations

import pytest

from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.rates import engine_rates
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window


def s(t: float, run: str = "a", **kw) -> Sample:
    return Sample(t_s=t, engine_run_id=run, engine_state=EngineState.READY, **kw)


def test_increase_handles_a_restart_and_skips_unknowns() -> None:
    w = Window.of([
        s(0, generation_tokens_total=100.0),
        s(1, generation_tokens_total=160.0),
        s(2, generation_tokens_total=None),          # scrape failed: unknown, not 0
        s(3, "b", generation_tokens_total=30.0),     # new run: counters restarted
        s(4, "b", generation_tokens_total=90.0),
    ])
    assert w.increase("generation_tokens_total", 0) == (60 + 30 + 60, 4)
    assert w.rate("generation_tokens_total", 10, 4) == pytest.approx(150 / 4)


def test_a_drop_within_one_run_is_a_reset() -> None:
    w = Window.of([s(0, prompt_tokens_total=50.0), s(1, prompt_tokens_total=10.0)])
    assert w.increase("prompt_tokens_total", 0) == (10.0, 1)


def test_rate_needs_two_known_values() -> None:
    w = Window.of([s(0, generation_tokens_total=None), s(1, generation_tokens_total=5.0)])
    assert w.rate("generation_tokens_total", 10, 1) is None
    assert Window().rate("generation_tokens_total", 10, 0) is None


def test_held_for_and_unchanged_for() -> None:
    w = Window.of([s(0, requests_running=0.0, iteration_tokens_count_total=10.0),
                   s(1, requests_running=2.0, iteration_tokens_count_total=12.0),
                   s(2, requests_running=2.0, iteration_tokens_count_total=12.0),
                   s(3, requests_running=3.0, iteration_tokens_count_total=12.0)])
    assert w.held_for(lambda x: (x.requests_running or 0) > 0, 3.5) == 2.5
    assert w.held_for(lambda x: x.requests_running == 0, 3.5) == 0.0
    assert w.unchanged_for(("iteration_tokens_count_total",), 3.5) == 2.5
    assert w.unchanged_for(("kv_cache_usage_ratio",), 3.5) is None


def test_unchanged_for_restarts_with_a_new_run() -> None:
    w = Window.of([s(0, "a", iteration_tokens_count_total=5.0),
                   s(1, "b", iteration_tokens_count_total=5.0)])
    assert w.unchanged_for(("iteration_tokens_count_total",), 2) == 1


def test_window_drops_old_samples() -> None:
    w = Window(max_age_seconds=10)
    for t in range(30):
        w.append(s(t))
    assert len(w) == 11 and next(iter(w)).t_s == 19


def test_speculative_ratios_per_position() -> None:
    # k=3 drafts; 100 drafts, 300 draft tokens, 150 accepted (80, 45, 25 by position).
    w = Window.of([
        s(0, spec_decode_num_drafts_total=0.0, spec_decode_num_draft_tokens_total=0.0,
          spec_decode_num_accepted_tokens_total=0.0,
          spec_decode_accepted_per_position_total=(0.0, 0.0, 0.0)),
        s(10, spec_decode_num_drafts_total=100.0, spec_decode_num_draft_tokens_total=300.0,
          spec_decode_num_accepted_tokens_total=150.0,
          spec_decode_accepted_per_position_total=(80.0, 45.0, 25.0),
          generation_tokens_total=250.0),
    ])
    r = engine_rates(w, 60, 10)
    assert r.spec_acceptance_ratio == 0.5
    assert r.spec_mean_acceptance_length == 2.5
    assert r.spec_acceptance_by_position == (0.8, 0.45, 0.25)
    assert r.spec_drafts == 100


def test_no_speculation_gives_unknown_ratios() -> None:
    w = Window.of([s(0, generation_tokens_total=0.0), s(1, generation_tokens_total=10.0)])
    r = engine_rates(w, 60, 1)
    assert r.generation_tokens_per_second == 10.0
    assert r.spec_acceptance_ratio is None and r.spec_acceptance_by_position is None


def test_rates_stop_at_now_for_past_points() -> None:
    # Flat until 30 s, then 100 tokens/s: the rate at 30 s must not see the later growth.
    w = Window.of([s(t, generation_tokens_total=max(0.0, t - 30) * 100) for t in range(61)])
    assert engine_rates(w, 10, 30).generation_tokens_per_second == 0.0
    assert engine_rates(w, 10, 60).generation_tokens_per_second == 100.0

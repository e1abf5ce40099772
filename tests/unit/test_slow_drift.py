"""Issue 29, item 5: slow drift. A sample gap of minutes while the engine served is a
warning on record (the box starved the supervisor); a leak that hides in swap (VmRSS flat,
RssAnon + VmSwap growing) is the creep guard's, as ollama #18106 measured it."""

from __future__ import annotations

import math
from typing import Any

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.guards import memory_forecast, sample_gaps
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window
from tests.unit.scenario import POLICY, samples

GiB = 1024**3
# ollama #18106: 9.35 GiB in ~5.5 h, ~1.7 GiB/h (5-12 MiB a request).
LEAK_BYTES_PER_S = 1.7 * GiB / 3600


def _findings(guard: Any, trace: list[Sample]) -> list[Any]:
    sit = Situation(Window.of(trace, 3600), LadderState(rung=0, since_s=0.0), POLICY,
                    trace[-1].t_s)
    return guard.check(sit)


def _gap(before: EngineState, after: EngineState, gap: float) -> list[Sample]:
    head = samples(0, 100, 2.0, engine_state=before, mem_available_bytes=60 * GiB)
    tail = samples(100 + gap, 110 + gap, 2.0, engine_state=after,
                   mem_available_bytes=60 * GiB, tick_lateness_seconds=gap - 1)
    return head + tail


def test_issue_29_a_gap_of_minutes_while_serving_is_a_warning_on_record() -> None:
    found = _findings(sample_gaps, _gap(EngineState.READY, EngineState.READY, 125.0))
    assert [(f.kind, str(f.severity), str(f.response)) for f in found] == [
        ("sample_gap_starved", "warning", "record")]
    assert found[0].evidence["gap_seconds"] == 125.0


def test_issue_29_a_short_gap_or_one_while_starting_stays_info() -> None:
    short = _findings(sample_gaps, _gap(EngineState.READY, EngineState.READY, 60.0))
    starting = _findings(sample_gaps, _gap(EngineState.STARTING, EngineState.STARTING, 300.0))
    for found in (short, starting):
        assert [(f.kind, str(f.severity)) for f in found] == [("sample_gap", "info")]


def test_issue_29_a_gap_across_a_new_run_is_not_starvation_while_serving() -> None:
    trace = _gap(EngineState.READY, EngineState.READY, 300.0)
    trace = [*trace[:51], *(Sample(**{**x.to_dict(), "engine_run_id": "r2",
                                      "engine_state": EngineState.READY})
                           for x in trace[51:])]
    assert [f.kind for f in _findings(sample_gaps, trace)] == ["sample_gap"]


def _swapping(t1: float, *, swap_free: float | None, mem_available: float = 14 * GiB,
              rate: float = LEAK_BYTES_PER_S, anon: float = 0.06 * GiB) -> list[Sample]:
    """VmRSS flat at ~70 MiB (the report's), RssAnon flat, VmSwap growing at ``rate``."""
    return samples(0, t1, 5.0, engine_rss_bytes=70 * 2**20, engine_rss_anon_bytes=int(anon),
                   engine_swap_bytes=lambda t: int(4 * GiB + rate * t),
                   mem_available_bytes=mem_available, swap_free_bytes=swap_free,
                   requests_running=4, requests_waiting=0)


def test_issue_29_a_leak_in_swap_near_the_end_of_swap_is_a_planned_restart() -> None:
    # Headroom: (14 - 2 x 2 GiB floor) above the creep floor + 6 GiB swap = 16 GiB ->
    # 9.4 h at 1.7 GiB/h: recorded. With 1 GiB of swap left and MemAvailable at the creep
    # floor: 0.6 h -> a warning and a planned restart.
    far = _findings(memory_forecast, _swapping(1500, swap_free=6 * GiB))  # 16 GiB
    assert [(f.kind, str(f.severity)) for f in far] == [("memory_trend", "info")]
    assert far[0].evidence["mib_per_hour"] == round(1.7 * 1024, 1)
    assert far[0].evidence["rss_mib_per_hour"] == 0.0
    near = _findings(memory_forecast, _swapping(1500, swap_free=GiB,
                                                mem_available=4 * GiB))
    assert [(f.kind, str(f.response)) for f in near] == [("memory_creep", "restart_when_calm")]
    assert near[0].evidence["headroom_bytes"] == GiB


def test_issue_29_no_swap_finding_below_the_rate_or_before_ten_minutes() -> None:
    slow = _findings(memory_forecast, _swapping(1500, swap_free=GiB, rate=100 * 2**20 / 3600))
    short = _findings(memory_forecast, _swapping(500, swap_free=GiB))
    assert slow == [] and short == []


def test_issue_29_unknown_or_not_finite_memory_claims_no_headroom() -> None:
    trace = _swapping(1500, swap_free=None, mem_available=math.nan)
    found = _findings(memory_forecast, trace)
    assert [f.kind for f in found] == ["memory_creep"]
    assert found[0].evidence["headroom_bytes"] == 0


def _speculating(t1: float, recent: tuple[float, ...], *, up: float = 7200.0,
                 history: tuple[float, ...] = (0.8, 0.6, 0.4)) -> list[Sample]:
    """A run up ``up`` s before the trace with ``history`` acceptance by position over its
    200,000 drafts, then 20 drafts a second accepted at ``recent`` (sglang #37326's shape)."""
    drafts0 = 200_000.0
    return samples(0, t1, 5.0, ready_since=-up, requests_running=4,
                   spec_decode_num_drafts_total=lambda t: drafts0 + 20 * t,
                   spec_decode_accepted_per_position_total=lambda t: tuple(
                       h * drafts0 + r * 20 * t for h, r in zip(history, recent, strict=True)))


def _drift(trace: list[Sample], rung: int = 0) -> list[Any]:
    from agent_supervisor.decide.guards import spec_drift
    sit = Situation(Window.of(trace, 900), LadderState(rung=rung, since_s=0.0), POLICY,
                    trace[-1].t_s)
    return spec_drift.check(sit)


def test_issue_29_acceptance_drift_is_judged_per_position_against_the_run() -> None:
    found = _drift(_speculating(600, (0.3, 0.15, 0.05)))
    assert [(f.kind, str(f.severity), str(f.response)) for f in found] == [
        ("spec_acceptance_drift", "warning", "record")]
    ev = found[0].evidence
    assert ev["acceptance_by_position"] == [0.3, 0.15, 0.05]
    assert ev["history_acceptance_by_position"] == [0.8, 0.6, 0.4]
    # Position 0 at 0.75x the history (just over 0.7x): no drift, whatever the deeper ones.
    assert _drift(_speculating(600, (0.6, 0.1, 0.0))) == []


def test_issue_29_no_drift_verdict_without_an_hour_of_history_or_speculation() -> None:
    assert _drift(_speculating(600, (0.3, 0.15, 0.05), up=2000)) == []
    assert _drift(_speculating(600, (0.3, 0.15, 0.05)), rung=2) == []     # nospec rung
    # A window shorter than the recent period: not judged on a part of it.
    assert _drift(_speculating(300, (0.3, 0.15, 0.05))) == []


def _decoding(t1: float, per_request: float, *, rung: int = 2, **over: Any) -> list[Sample]:
    """One request decoding at ``per_request`` tokens/s (the report's 94 ms a step: 10.6)."""
    fields: dict[str, Any] = {"requests_running": 1, "gpu_sm_clock_mhz": 2400.0,
                              "gpu_sm_clock_max_mhz": 3003.0, "gpu_clock_event_reasons": (),
                              "generation_tokens_total": lambda t: per_request * t}
    fields.update(over)
    return samples(0, t1, 5.0, rung=rung, **fields)


def _slow(trace: list[Sample], rung: int = 2, baselines: Any = None) -> list[Any]:
    from agent_supervisor.decide.guards import platform_slow
    mode = POLICY.modes[rung].name
    base = {mode: [(1.0, 15.9), (4.0, 13.0)]} if baselines is None else baselines
    sit = Situation(Window.of(trace, 900), LadderState(rung=rung, since_s=0.0), POLICY,
                    trace[-1].t_s, base)
    return platform_slow.check(sit)


def test_issue_29_decode_slower_than_calibrated_with_nvml_silent_is_recorded() -> None:
    found = _slow(_decoding(600, 10.6))
    assert [(f.kind, str(f.response)) for f in found] == [("platform_slow_state", "record")]
    assert found[0].evidence["step_time_ratio"] == round(15.9 / 10.6, 3)
    assert "power cycle" in found[0].summary
    assert _slow(_decoding(600, 12.5)) == []                 # 0.79x: within the ratio


def test_issue_29_no_slow_state_verdict_when_nvml_names_it_or_nothing_to_compare() -> None:
    assert _slow(_decoding(600, 10.6, gpu_clock_event_reasons=("hw_slowdown",))) == []
    assert _slow(_decoding(600, 10.6, gpu_sm_clock_mhz=1000.0)) == []    # low clock
    assert _slow(_decoding(600, 10.6, rung=0), rung=0) == []             # speculation on
    assert _slow(_decoding(600, 10.6), baselines={}) == []              # not calibrated
    assert _slow(_decoding(600, 10.6, requests_running=0)) == []         # idle

"""Issue 13: properties of the field-case library under noise and cadence (the cases of
issue 13's kinds, ``KINDS``).

- No action on any negative control under random jitter of timing and values within the
  report's noise (the case's ``noise`` key: a ratio, default ``DEFAULT_NOISE``; sample times
  move by up to ``TIME_JITTER`` of their spacing, gauges and counter increments by the
  ratio, sample by sample).
- Decisions invariant to the sampling cadence between 1 s and 5 s where the report allows:
  every positive case rebuilt at a cadence of 1-5 s (spans already sparser, such as a
  freeze gap, keep theirs) takes the same first action, with the same finding and rung,
  within one sample of its deadlines. A case opts out with ``cadence: <why not>``.
"""

from __future__ import annotations

import copy
import dataclasses
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_supervisor.decide.decision import Action
from tests.helpers.field_case_kinds import KINDS
from tests.helpers.field_cases import (
    FieldCase,
    all_cases,
    case_samples,
    first_action,
    load_case,
    play_case,
)

DEFAULT_NOISE = 0.02
TIME_JITTER = 0.2
#: Gauges jittered by the noise ratio (times, ids, states and flags never are).
GAUGES = ("requests_running", "requests_waiting", "kv_cache_usage_ratio",
          "mem_available_bytes", "engine_rss_bytes", "gpu_temperature_c", "gpu_power_w",
          "gpu_sm_clock_mhz", "gpu_utilization_ratio", "host_temperature_c",
          "gateway_requests_in_flight", "gateway_requests_queued",
          "gateway_prompt_tokens_in_flight", "engine_rss_anon_bytes", "engine_swap_bytes")
COUNTERS = ("generation_tokens_total", "prompt_tokens_total", "iteration_tokens_count_total",
            "preemptions_total", "spec_decode_num_drafts_total",
            "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total",
            "request_tpot_sum_seconds_total", "request_tpot_count_total",
            "requests_finished_total")

CASES = [c for c in (load_case(p) for p in all_cases()) if c.kind in KINDS]
#: By name: Hypothesis prints a failing example's arguments, and a whole case (its samples
#: and policy) runs to megabytes, past its repr limit (the warning then hides the failure).
BY_NAME = {c.name: c for c in CASES}
CONTROLS = [c.name for c in CASES if c.control]
POSITIVES = [c.name for c in CASES if not c.control and not c.raw.get("cadence")]


def _jitter(case: FieldCase, seed: int) -> FieldCase:
    """The case's samples with noise on times, gauges and counter increments."""
    rng = random.Random(seed)
    noise = float(case.raw.get("noise", DEFAULT_NOISE))
    out, prev_in, prev_out = [], None, None
    for i, s in enumerate(case.samples):
        nxt = case.samples[i + 1].t_s if i + 1 < len(case.samples) else None
        gap = min(s.t_s - prev_in.t_s if prev_in else 1.0, (nxt - s.t_s) if nxt else 1.0)
        changes = {"t_s": s.t_s + rng.uniform(-TIME_JITTER, TIME_JITTER) * gap}
        for f in GAUGES:
            v = getattr(s, f)
            if isinstance(v, int | float) and not isinstance(v, bool) and v:
                j = v * (1 + rng.uniform(-noise, noise))
                changes[f] = int(j) if isinstance(v, int) else j
        for f in COUNTERS:
            v, before = getattr(s, f), getattr(prev_in, f, None) if prev_in else None
            done = getattr(prev_out, f, None) if prev_out else None
            if v is None or before is None or done is None or prev_in.engine_run_id \
                    != s.engine_run_id:
                continue
            changes[f] = done + max(v - before, 0.0) * (1 + rng.uniform(-noise, noise))
        jittered = dataclasses.replace(s, **changes)
        out.append(jittered)
        prev_in, prev_out = s, jittered
    return dataclasses.replace(case, samples=out)


@pytest.mark.parametrize("name", CONTROLS)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_issue_13_controls_stay_quiet_under_noise(name: str, seed: int) -> None:
    case = BY_NAME[name]
    noisy = _jitter(case, seed)
    steps = play_case(noisy)
    kinds = {f.kind for _, d in steps for f in d.findings}
    assert case.kind not in kinds, f"{case.name}: raised {case.kind} under noise"
    never = [d for _, d in steps if str(d.action) in case.expect.get("never", ())]
    assert not never, f"{case.name}: {never[0].action} under noise: {never[0].explanation}"
    expect = case.expect.get("action", "hold")
    got = first_action(steps)
    if expect == "hold":
        assert got is None, f"{case.name}: {got[1].action} at {got[0]}: {got[1].explanation}"
    else:
        assert got is not None and got[1].action is Action(expect)


def _at_cadence(case: FieldCase, dt: float) -> FieldCase:
    segments = copy.deepcopy(case.raw["segments"])
    last = 1.0
    for seg in segments:
        last = float(seg.get("dt_s", last))
        if last <= 5.0:
            seg["dt_s"] = dt
    return dataclasses.replace(case, samples=case_samples(segments, source=case.name))


@pytest.mark.parametrize("name", POSITIVES)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dt=st.sampled_from([1.0, 2.0, 3.0, 4.0, 5.0]))
def test_issue_13_decisions_do_not_depend_on_the_cadence(name: str, dt: float) -> None:
    case = BY_NAME[name]
    steps = play_case(_at_cadence(case, dt))
    expect = case.expect
    if expect.get("action") == "hold":
        seen = [t for t, d in steps for f in d.findings if f.kind == expect.get("finding")]
        assert not expect.get("finding") or (seen and seen[0] <= float(expect["by_s"]) + dt)
        assert first_action(steps) is None
        return
    got = first_action(steps, skip=expect.get("allow_before", ()))
    assert got is not None, f"{case.name} at {dt:g} s: no action"
    t, d = got
    assert d.action is Action(expect["action"]), f"{case.name} at {dt:g} s: {d.explanation}"
    assert t <= float(expect["by_s"]) + dt, f"{case.name} at {dt:g} s: {t}"
    assert t >= float(expect.get("not_before_s", 0)) - dt, f"{case.name} at {dt:g} s: {t}"
    if expect.get("finding"):
        assert expect["finding"] in {f.kind for f in d.findings}
    if "rung" in expect:
        assert d.rung == int(expect["rung"])

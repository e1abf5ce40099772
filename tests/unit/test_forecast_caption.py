"""Issue 19: the dashboard's memory forecast exists only when the forecast guard would fit
one: not over a flat start-up at 9 s of uptime, yes over a steady fall after the
start-up exclusion, with the guard's own slope."""

from __future__ import annotations

from agent_supervisor.show.api.telemetry import _forecast
from agent_supervisor.telemetry.rates import slope
from tests.unit.scenario import POLICY, GiB, samples


def test_issue_19_no_forecast_in_the_first_seconds_after_ready() -> None:
    trace = samples(0, 9, wall_s=lambda t: 1e9 + t, mem_available_bytes=lambda t: 20 * GiB
                    - t * 2**20)
    assert _forecast(trace, POLICY, 9.0) is None


def test_issue_19_no_forecast_with_too_few_samples_or_another_run() -> None:
    cfg = POLICY.guards.memory_forecast
    t0 = cfg.ignore_after_ready_seconds
    sparse = samples(t0, t0 + cfg.fit_seconds, dt=cfg.fit_seconds / 5,
                     wall_s=lambda t: 1e9 + t, mem_available_bytes=lambda t: 20 * GiB - t)
    assert _forecast(sparse, POLICY, sparse[-1].t_s) is None
    old = samples(t0, t0 + 200, run="r0", wall_s=lambda t: 1e9 + t,
                  mem_available_bytes=lambda t: 20 * GiB - t * 2**20)
    new = samples(t0 + 201, t0 + 210, run="r1", ready_since=t0 + 200,
                  wall_s=lambda t: 1e9 + t, mem_available_bytes=8 * GiB)
    assert _forecast(old + new, POLICY, new[-1].t_s) is None


def test_issue_19_forecast_after_the_start_up_exclusion() -> None:
    cfg = POLICY.guards.memory_forecast
    end = cfg.ignore_after_ready_seconds + cfg.fit_seconds
    trace = samples(0, end, wall_s=lambda t: 1e9 + t,
                    mem_available_bytes=lambda t: 20 * GiB - t * 2**20)
    fc = _forecast(trace, POLICY, end)
    assert fc is not None
    pts = [(s.t_s, float(s.mem_available_bytes)) for s in trace
           if s.t_s >= end - cfg.fit_seconds]
    assert fc["slope_bytes_per_second"] == slope(pts)
    assert round(fc["slope_bytes_per_second"]) == -(2**20)
    floor = POLICY.guards.memory_floor.min_available_bytes
    assert round(fc["seconds_to_floor"]) == round((20 * GiB - end * 2**20 - floor) / 2**20)

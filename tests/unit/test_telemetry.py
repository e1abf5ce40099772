"""Telemetry rows from the recorded CPU-engine trace, and the 10 s -> 1 min fold."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_supervisor.record.models import TelemetryRow
from agent_supervisor.record.records import TelemetryPoint
from agent_supervisor.record.store import Store
from agent_supervisor.record.telemetry import add_telemetry, downsample, telemetry, telemetry_point
from agent_supervisor.record.trace import read_trace
from agent_supervisor.telemetry.rates import engine_rates
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window
from tests.helpers.paths import FIXTURES

TRACE = FIXTURES / "traces" / "cpu-demo-spec-slower.trace.jsonl"


@pytest.fixture(scope="module")
def samples() -> list[Sample]:
    return [Sample.from_dict({k: v for k, v in r.items() if k != "type"})
            for r in read_trace(TRACE) if r["type"] == "sample"]


def test_point_columns_are_the_table_columns() -> None:
    assert {f.name for f in dataclasses.fields(TelemetryPoint)} == (
        {c.name for c in TelemetryRow.__table__.columns} - {"id", "fleet", "host"})


def test_a_point_from_ten_seconds_of_the_recorded_engine(samples: list[Sample]) -> None:
    now = samples[30]                       # the engine is ready and serving 4 agents
    window = Window.of(samples[:31])
    point = telemetry_point(window, now_s=now.t_s, mode="mtp2")
    stretch = [s for s in samples[:31] if s.t_s >= now.t_s - 10]
    assert len(stretch) == 10
    known = [s.requests_running for s in stretch if s.requests_running is not None]
    assert point.requests_running == pytest.approx(sum(known) / len(known))
    assert point.mem_available_bytes == round(
        sum(s.mem_available_bytes for s in stretch) / len(stretch))
    assert isinstance(point.mem_available_bytes, int)
    rates = engine_rates(window, 10.0, now.t_s)
    assert point.generation_tokens_per_second == rates.generation_tokens_per_second
    assert point.generation_tokens_per_second == pytest.approx(356.97, abs=0.01)
    assert point.spec_acceptance_ratio == 0.0    # the untrained MTP head: known zero
    assert point.gpu_temperature_c is None       # no GPU on that box: unknown, not 0
    assert (point.engine_state, point.mode, point.rung, point.resolution_seconds) == (
        "ready", "mtp2", 0, 10)
    assert point.at == datetime.fromtimestamp(now.wall_s - 10, UTC)


def test_no_samples_no_point(samples: list[Sample]) -> None:
    assert telemetry_point(Window(), now_s=1.0) is None
    bare = Window.of([Sample(t_s=1.0)])
    assert telemetry_point(bare, now_s=1.0) is None         # no wall time
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert telemetry_point(bare, now_s=1.0, at=at).at == at


def test_downsample_averages_known_values_and_keeps_the_last_state() -> None:
    t0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    rows = [TelemetryPoint(at=t0 + timedelta(seconds=10 * i), mem_available_bytes=100 * i,
                           kv_cache_usage_ratio=None if i % 2 else 0.5,
                           tick_lateness_seconds=float(i), mode="fast" if i < 8 else "safe",
                           engine_state="ready")
            for i in range(9)]                # 8:00:00 .. 8:01:20: two minutes
    first, second = downsample(rows)
    assert (first.at, first.resolution_seconds) == (t0, 60)
    assert first.mem_available_bytes == 250 and first.kv_cache_usage_ratio == 0.5
    assert first.tick_lateness_seconds == 5.0 and first.mode == "fast"
    assert second.mem_available_bytes == 700 and second.mode == "safe"
    assert first.gpu_power_w is None


def test_points_round_trip_through_the_store(tmp_path: Path, samples: list[Sample]) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    window = Window.of(samples)
    points = [telemetry_point(window.between(0, s.t_s), now_s=s.t_s) for s in samples[10::10]]
    assert add_telemetry(store=store, points=points) == len(points)
    rows = telemetry(store=store, since=points[0].at)
    assert [r.at for r in rows] == [p.at for p in points]
    assert rows[2].generation_tokens_per_second == points[2].generation_tokens_per_second
    (only,) = telemetry(store=store, since=points[0].at, until=points[1].at,
                        resolution_seconds=10, host="h")
    assert only.id == rows[0].id
    store.close()

"""GET /api/telemetry and GET /metrics."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families


async def test_telemetry_columns_for_the_charts(client, service) -> None:
    await asyncio.sleep(1.0)
    tel = (await client.get("/api/telemetry", params={"seconds": 60})).json()
    assert tel["source"] == "live" and len(tel["t"]) >= 3
    n = len(tel["t"])
    for field in ("mem_available_bytes", "requests_running", "kv_cache_usage_ratio",
                  "generation_tokens_per_second", "gpu_temperature_c"):
        assert len(tel[field]) == n, field
    assert all(v > 0 for v in tel["mem_available_bytes"])
    assert all(v is None for v in tel["gpu_temperature_c"])      # no GPU here: unknown
    assert tel["memory_floor_bytes"] == service.policy.guards.memory_floor.min_available_bytes
    stored = (await client.get("/api/telemetry", params={"since": "2020-01-01T00:00:00Z"}))
    assert stored.status_code == 200 and stored.json()["source"] == "store"


async def test_metrics_follow_prometheus_conventions(client) -> None:
    await asyncio.sleep(0.6)
    text = (await client.get("/metrics")).text
    names = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    for name in ("supervisor_mode_info", "supervisor_rung", "supervisor_mode_state",
                 "supervisor_engine_state", "supervisor_mem_available_bytes",
                 "supervisor_memory_floor_bytes", "supervisor_engine_requests_running",
                 "supervisor_gateway_requests_in_flight", "supervisor_store_spooled_records"):
        assert name in names, name
    assert 'supervisor_mode_info{fleet="test",mode="fast",rung="0"} 1.0' in text
    assert all(n.startswith("supervisor_") for n in names if not n.startswith(
        ("python_", "process_")))

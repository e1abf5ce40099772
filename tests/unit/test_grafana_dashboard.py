"""Every metric the Grafana dashboards in dashboards/ query is exported by someone: the
supervisor (names from a live prometheus_client registry holding its metrics and its
collector) or vLLM (sample names of the recorded 0.32.0 scrapes). A panel naming a metric
nobody exports fails here, not on an operator's empty graph."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.grafana import (  # noqa: F401  (moved; importers use tests.helpers)
    _GROUPING,
    _IDENT,
    _LABEL_VALUES,
    _MATCHERS,
    _RANGE,
    _STRING,
    PROMQL_WORDS,
    SUFFIXES,
    metric_names,
    supervisor_names,
)
from tests.helpers.paths import FIXTURES, ROOT

DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
VLLM_SCRAPES = sorted((FIXTURES / "vllm" / "0.32.0").glob("*.metrics.txt"))


def queries(dashboard: dict) -> Iterator[tuple[str, str]]:
    """(where, expr) for every panel target (rows' nested panels too), annotation and
    templating query."""
    def panels(items: list[dict]) -> Iterator[dict]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                yield f"panel {panel.get('title')!r}", target["expr"]
    for ann in dashboard.get("annotations", {}).get("list", []):
        if ann.get("expr"):
            yield f"annotation {ann.get('name')!r}", ann["expr"]
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            q = var.get("query")
            yield f"variable {var['name']!r}", q.get("query", "") if isinstance(q, dict) else q


def vllm_names() -> set[str]:
    """Sample names in the recorded vLLM 0.32.0 scrapes (histograms: _bucket/_sum/_count)."""
    return {s.name for path in VLLM_SCRAPES
            for family in text_string_to_metric_families(path.read_text())
            for s in family.samples}


def unexported(dashboard: dict, exported: set[str]) -> dict[str, list[str]]:
    """Metric names the dashboard queries that nobody exports -> where they are used."""
    missing: dict[str, list[str]] = {}
    for where, expr in queries(dashboard):
        for name in sorted(metric_names(expr) - exported):
            missing.setdefault(name, []).append(where)
    return missing


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    return supervisor_names(tmp_path_factory.mktemp("policy")) | vllm_names()


def test_metric_names_are_read_from_promql() -> None:
    assert metric_names('histogram_quantile(0.95, sum by (le) (rate('
                        'vllm:time_to_first_token_seconds_bucket{job=~"$j", le!="+Inf"}'
                        '[$__rate_interval])))') == {"vllm:time_to_first_token_seconds_bucket"}
    assert metric_names("sum by (position) (rate(a_total{x=\"y)\"}[5m])) / ignoring(position)"
                        " group_left sum(rate(b:c_total[5m]))") == {"a_total", "b:c_total"}
    assert metric_names("supervisor_rung") == {"supervisor_rung"}
    assert metric_names('supervisor_mode_state{job="s"} == 1') == {"supervisor_mode_state"}
    assert metric_names("1 + sum(x_sum) / sum(x_count) offset 5m > bool 1e3") == {
        "x_sum", "x_count"}
    assert metric_names("max_over_time(late_seconds [$__range])") == {"late_seconds"}
    assert metric_names("label_values(vllm:num_requests_running{job=~\"$j\"}, model_name)") \
        == {"vllm:num_requests_running"}
    assert metric_names("label_values(job)") == set()


def test_the_exported_names_hold_both_sources(exported: set[str]) -> None:
    assert len(VLLM_SCRAPES) >= 2
    assert {"supervisor_incidents_total", "supervisor_mode_info", "supervisor_rung",
            "supervisor_mode_state", "supervisor_engine_state",
            "supervisor_gateway_queue_wait_seconds_bucket",
            "supervisor_tick_lateness_seconds", "vllm:kv_cache_usage_perc",
            "vllm:spec_decode_num_accepted_tokens_total",
            "vllm:time_to_first_token_seconds_bucket"} <= exported
    assert "supervisor_incidents" not in exported       # a counter is read as ..._total


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_queried_metric_is_exported(path: Path, exported: set[str]) -> None:
    dashboard = json.loads(path.read_text())
    assert list(queries(dashboard)), f"{path.name} has no queries"
    assert unexported(dashboard, exported) == {}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_a_metric_nobody_exports_is_caught(path: Path, exported: set[str]) -> None:
    dashboard = copy.deepcopy(json.loads(path.read_text()))
    dashboard["panels"].append({"type": "timeseries", "title": "typo", "targets": [
        {"refId": "A", "expr": 'sum(rate(supervisor_incident_total{job=~"$j"}[5m])) '
                               "/ vllm:made_up_ratio"}]})
    assert unexported(dashboard, exported) == {
        "supervisor_incident_total": ["panel 'typo'"], "vllm:made_up_ratio": ["panel 'typo'"]}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panels_query_the_prometheus_datasource_variable(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    (var,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert var["query"] == "prometheus"
    ref = {"type": "prometheus", "uid": f"${{{var['name']}}}"}
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == ref, panel["title"]
            assert all(t["datasource"] == ref for t in panel["targets"]), panel["title"]


def test_the_supervisor_dashboard_covers_what_operators_watch() -> None:
    dashboard = json.loads((ROOT / "dashboards" / "supervisor.json").read_text())
    used = set().union(*(metric_names(expr) for _, expr in queries(dashboard)))
    assert {
        "supervisor_mode_info", "supervisor_mode_state", "supervisor_rung",
        "supervisor_transitions_total", "supervisor_incidents_total",
        "supervisor_mem_available_bytes", "supervisor_memory_floor_bytes",
        "supervisor_psi_memory_full_avg10_ratio", "supervisor_gpu_temperature_celsius",
        "supervisor_gpu_power_watts", "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:generation_tokens_total", "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_draft_tokens_total", "supervisor_gateway_requests_total",
        "supervisor_gateway_rejections_total", "supervisor_gateway_queue_wait_seconds_bucket",
        "supervisor_tick_lateness_seconds",
    } <= used

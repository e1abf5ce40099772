"""Issue 33: the Grafana dashboard has an engine-neutral row whose panels read only the
supervisor's own series, so a llama-server user sees them filled as a vLLM user does. Each
series of the row must be one the supervisor exports (its registry and collector), and
every one must be present in a scrape of the supervisor fed by either engine's recorded
/metrics (vLLM 0.32.0, llama-server 0.3.36) through its engine profile."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agent_supervisor.gateway.metrics import GatewayMetrics
from agent_supervisor.sense.engine_metrics import parse_metrics
from agent_supervisor.sense.profiles import profile_for
from agent_supervisor.show.metrics import StateCollector, StateView, SupervisorMetrics
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.rates import engine_rates
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window
from tests.helpers.grafana import metric_names, supervisor_names
from tests.helpers.paths import ROOT
from tests.helpers.policies import fake_engine_policy

DASHBOARD = ROOT / "dashboards" / "supervisor.json"
SAMPLE_FIELDS = {f.name for f in dataclasses.fields(Sample)}
SCRAPES = {"vllm": ROOT / "tests/fixtures/vllm/0.32.0/mtp2.busy.metrics.txt",
           "llama_cpp": ROOT / "tests/fixtures/llamacpp/0.3.36/metrics.txt"}


def neutral_row(dashboard: dict) -> tuple[dict, list[dict]]:
    """The engine-neutral row and the panels under it (up to the next row)."""
    panels = dashboard["panels"]
    (at,) = [i for i, p in enumerate(panels)
             if p["type"] == "row" and p["title"].startswith("Engine (any engine")]
    below: list[dict] = []
    for p in panels[at + 1:]:
        if p["type"] == "row":
            break
        below.append(p)
    return panels[at], below + panels[at].get("panels", [])


def row_series(panels: list[dict]) -> dict[str, set[str]]:
    return {p["title"]: set().union(*(metric_names(t["expr"]) for t in p["targets"]))
            for p in panels}


def scrape_fed_by(kind: str, tmp_path: Path) -> set[str]:
    """Sample names of the supervisor's /metrics after 60 s of an engine serving: the
    engine's recorded scrape read through its profile, counters moving, the gateway
    carrying requests."""
    profile = profile_for(kind)
    scraped = parse_metrics(SCRAPES[kind].read_text(), table=profile.metrics,
                            per_position=profile.per_position_metric)
    known: dict[str, Any] = {k: v for k, v in scraped.items() if v is not None}
    window = Window()
    for t in range(0, 61, 5):
        fields = {k: (v + 10 * t if k.endswith("_total") and isinstance(v, float)
                      else tuple(x + 2 * t for x in v) if isinstance(v, tuple) else v)
                  for k, v in known.items()}
        fields["requests_running"] = 2.0
        window.append(Sample(t_s=float(t), engine_state=EngineState.READY,
                             mem_available_bytes=50e9, health_latency_seconds=0.01,
                             **{k: v for k, v in fields.items() if k in SAMPLE_FIELDS}))
    rates = engine_rates(window, 60.0, 60.0)
    registry = CollectorRegistry()
    SupervisorMetrics(registry)
    GatewayMetrics(registry).in_flight.set(2)
    policy = fake_engine_policy(tmp_path)
    registry.register(StateCollector(StateView(lambda: policy, latest=lambda: window.latest,
                                               rates=lambda: rates, rung=lambda: 0,
                                               spooled=lambda: 0)))
    return {s.name for family in registry.collect() for s in family.samples}


def test_issue_33_the_dashboard_has_an_engine_neutral_row() -> None:
    row, panels = neutral_row(json.loads(DASHBOARD.read_text()))
    assert "llama-server" in row["title"] and not row["collapsed"]
    assert len(panels) >= 5
    used = set().union(*row_series(panels).values())
    # Throughput, load (engine and gateway), memory headroom, per-request speed.
    assert {"supervisor_engine_generation_tokens_per_second",
            "supervisor_engine_requests_running", "supervisor_gateway_requests_in_flight",
            "supervisor_mem_available_bytes", "supervisor_memory_floor_bytes",
            "supervisor_engine_requests_waiting"} <= used


def foreign(panels: list[dict], exported: set[str]) -> dict[str, set[str]]:
    """Panel title -> the series it reads that are not the supervisor's own exports."""
    return {title: bad for title, names in row_series(panels).items()
            if (bad := {n for n in names if not n.startswith("supervisor_")
                        or n not in exported}) or not names}


def test_issue_33_the_neutral_row_reads_only_series_the_supervisor_exports(
        tmp_path: Path) -> None:
    _, panels = neutral_row(json.loads(DASHBOARD.read_text()))
    assert foreign(panels, supervisor_names(tmp_path)) == {}


@pytest.mark.parametrize("kind", ["vllm", "llama_cpp"])
def test_issue_33_every_neutral_panel_is_filled_for_either_engine(kind: str,
                                                                  tmp_path: Path) -> None:
    _, panels = neutral_row(json.loads(DASHBOARD.read_text()))
    exported = scrape_fed_by(kind, tmp_path)
    assert {t: n - exported for t, n in row_series(panels).items() if n - exported} == {}


def test_issue_33_a_foreign_or_unfilled_series_in_the_row_is_caught(tmp_path: Path) -> None:
    _, panels = neutral_row(json.loads(DASHBOARD.read_text()))
    panels[0]["targets"].append({"refId": "Y", "expr": "vllm:kv_cache_usage_perc"})
    panels[1]["targets"].append({"refId": "Z", "expr": "supervisor_made_up_ratio"})
    assert foreign(panels, supervisor_names(tmp_path)) == {
        panels[0]["title"]: {"vllm:kv_cache_usage_perc"},
        panels[1]["title"]: {"supervisor_made_up_ratio"}}
    # vLLM's per-request decode speed (its TPOT histogram) stays empty for llama-server.
    panels[2]["targets"] = [{"refId": "A",
                             "expr": "supervisor_engine_tokens_per_second_per_request"}]
    assert "supervisor_engine_tokens_per_second_per_request" not in scrape_fed_by(
        "llama_cpp", tmp_path)
    assert "supervisor_engine_tokens_per_second_per_request" in scrape_fed_by(
        "vllm", tmp_path / "v")

"""``make_recorder(store, tmp_path, url)``: a runtime ``Recorder`` (record writer with a spool in
``tmp_path``, supervisor metrics, an alerter posting to ``url``) and its registry;
``sample_value(registry, name, **labels)``: one sample's value, 0.0 when absent."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from agent_supervisor.policy.sections import AlertSpec
from agent_supervisor.record.store import Store
from agent_supervisor.record.writer import RecordWriter
from agent_supervisor.runtime.recorder import Recorder
from agent_supervisor.show.alerts import Alerter
from agent_supervisor.show.metrics import SupervisorMetrics


def sample_value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def make_recorder(store: Store, tmp_path: Path, url: str) -> tuple[Recorder, CollectorRegistry]:
    registry = CollectorRegistry()
    metrics = SupervisorMetrics(registry)
    alerter = Alerter(AlertSpec(webhook_url=url, min_interval_seconds=0), "test",
                      metrics.alerts)
    writer = RecordWriter(store, spool_path=tmp_path / "spool.jsonl")
    return Recorder(writer, metrics, alerter), registry

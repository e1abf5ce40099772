"""Issue 33: a fresh service's /metrics carries every incident (kind, severity) and every
rung change (direction, cause) series from the first scrape, so Prometheus sees the first
incident of a kind, and the first step down, as an increase."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from agent_supervisor.show.incident_kinds import KNOWN_INCIDENTS
from agent_supervisor.show.metrics import TRANSITION_CAUSES


async def test_issue_33_a_fresh_scrape_holds_every_incident_and_rung_change_series(
        client) -> None:
    text = (await client.get("/metrics")).text
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    incidents = {(s.labels["kind"], s.labels["severity"]): s.value for s in samples
                 if s.name == "supervisor_incidents_total"}
    assert set(KNOWN_INCIDENTS) <= set(incidents)
    # Nothing went wrong on the way up: the guards' kinds are all there at 0.
    assert incidents[("memory_floor", "emergency")] == 0.0
    assert incidents[("engine_hung", "critical")] == 0.0
    assert incidents[("spec_slower_than_plain", "warning")] == 0.0
    changes = {(s.labels["direction"], s.labels["cause"]): s.value for s in samples
               if s.name == "supervisor_rung_changes_total"}
    assert changes == {(d, c): 0.0 for d in ("down", "up") for c in TRANSITION_CAUSES}

"""Issue 19: a live scrape of the running service's /metrics passes ``promtool check
metrics``, carries build info and process metrics, no ``_created`` series, and every
series the alert rules read on a healthy service."""

from __future__ import annotations

import asyncio
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from agent_supervisor import __version__
from tests.helpers.alert_rules import promtool


async def test_issue_19_live_scrape_passes_promtool_check_metrics(client) -> None:
    await asyncio.sleep(0.8)
    text = (await client.get("/metrics")).text
    run = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == "" and run.stderr.strip() == "", run.stdout + run.stderr


async def test_issue_19_build_info_process_metrics_and_no_created_series(client) -> None:
    await asyncio.sleep(0.8)
    text = (await client.get("/metrics")).text
    samples = {s.name: s for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples["supervisor_build_info"].labels["version"] == __version__
    assert samples["supervisor_build_info"].value == 1
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_open_fds", "process_start_time_seconds"):
        assert samples[name].value > 0, name
    assert not [n for n in samples if n.endswith("_created")]
    # What the alert rules read, on a healthy service with a ready engine:
    assert samples["supervisor_gave_up"].value == 0
    assert samples["supervisor_paused"].value == 0
    assert samples["supervisor_recent_crashes"].value == 0
    assert 0 <= samples["supervisor_last_sample_age_seconds"].value < 5
    assert samples["supervisor_start_limit_burst"].value == 3
    hung = [s for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == "supervisor_incidents_total" and s.labels["kind"] == "engine_hung"]
    assert [s.value for s in hung] == [0.0]     # there from the first scrape, for increase()

"""Issue 19: the Prometheus alerting rules in dashboards/alerts/ are valid, their unit
tests pass under ``promtool test rules``, and every metric they read is one the
supervisor exports (names taken from its exporters, not retyped)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.helpers.alert_rules import ALERTS, RULES, promtool, rules

RULE_TESTS = ALERTS / "supervisor.rules.test.yml"

#: Every alert the issue asks for, by the name it has in the rules.
EXPECTED = {"SupervisorScrapeFailing", "SupervisorAbsent", "SupervisorTicksStale",
            "EngineDown", "EngineCrashLoop", "EngineHung", "MemoryFloorNear", "StepDown",
            "SupervisorGaveUp", "RebootRequired", "GatewayRejecting"}


def test_issue_19_rules_are_valid_and_pass_their_unit_tests() -> None:
    check = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(rules())} rules found" in check.stdout
    run = subprocess.run([promtool(), "test", "rules", RULE_TESTS.name], cwd=ALERTS,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_issue_19_every_alert_asked_for_exists_and_is_unit_tested() -> None:
    names = {r["alert"] for r in rules()}
    assert names == EXPECTED
    tested = {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in case.get("alert_rule_test", [])}
    assert tested == EXPECTED
    for r in rules():
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]


def test_issue_19_rules_read_only_metrics_the_supervisor_exports() -> None:
    from agent_supervisor.show import metrics

    source = "\n".join(Path(m.__file__).read_text() for m in (
        metrics, __import__("agent_supervisor.gateway.metrics", fromlist=["x"])))
    read = {name for r in rules() for name in re.findall(r"\b(supervisor_[a-z_]+|up)\b",
                                                          r["expr"])}
    read.discard("up")
    assert read, "no supervisor metric read by the rules"
    for name in read:
        # StateSet families are read by their own name; counters by name + _total.
        base = name.removesuffix("_total")
        assert f'"{base}' in source or f'"{name}"' in source, f"{name} is not exported"

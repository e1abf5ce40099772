"""Issue 33: the dashboards and alert rules the product ships are the repository's, the
runbook the rules link included: ``agent_supervisor/data/dashboards`` is a link to the
top-level ``dashboards/``, pyproject.toml's package-data carries each of its files into a
wheel, and ``supervisor dashboards --output DIR`` / ``supervisor alert-rules --output DIR``
write them unchanged."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from agent_supervisor.cli import main
from tests.helpers.paths import ROOT

DASHBOARDS = ROOT / "dashboards"
DATA = ROOT / "agent_supervisor" / "data" / "dashboards"


def test_issue_33_the_data_copy_is_a_link_to_the_source() -> None:
    assert DATA.is_symlink() and DATA.resolve() == DASHBOARDS.resolve()


def test_issue_33_package_data_carries_every_dashboard_file() -> None:
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["agent_supervisor"]
    files = [p.relative_to(DASHBOARDS).as_posix() for p in DASHBOARDS.rglob("*") if p.is_file()]
    assert "alerts/runbook.md" in files
    left_out = [f for f in files
                if not any(fnmatch.fnmatch(f"data/dashboards/{f}", g) for g in globs)]
    assert left_out == []


def test_issue_33_alert_rules_and_dashboards_output_write_the_repository_files(
        tmp_path: Path, capsys) -> None:
    assert main(["alert-rules", "--output", str(tmp_path / "rules")]) == 0
    assert main(["dashboards", "--output", str(tmp_path / "grafana")]) == 0
    capsys.readouterr()
    rules = {p.name: p.read_text() for p in (tmp_path / "rules").iterdir()}
    assert rules == {p.name: p.read_text() for p in (DASHBOARDS / "alerts").iterdir()}
    assert {"supervisor.rules.yml", "supervisor.rules.test.yml", "runbook.md"} <= set(rules)
    grafana = {p.name: p.read_text() for p in (tmp_path / "grafana").iterdir()}
    assert grafana == {p.name: p.read_text() for p in DASHBOARDS.glob("*.json")}

"""The shipped Prometheus alert rules (dashboards/alerts/): ``RULES`` (supervisor.rules.yml),
``rules()`` (its rules, every group flattened) and ``promtool()`` (the binary's path; the
test fails if it is missing)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

ALERTS = Path(__file__).resolve().parents[2] / "dashboards" / "alerts"


RULES = ALERTS / "supervisor.rules.yml"


def promtool() -> str:
    """The promtool binary; `make test` installs it (Debian's `prometheus` package)."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: `make test` installs it (apt-get install "
                    "prometheus); or run `make promtool`")
    return path


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]

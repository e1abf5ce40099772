"""Issue 16: the Grafana dashboard has a ``host`` variable and every query filters on it,
so one dashboard shows one box of a fleet, several, or all."""

from __future__ import annotations

import json
import re

from tests.helpers.paths import ROOT

DASHBOARD = ROOT / "dashboards" / "supervisor.json"


def _exprs(node: object) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "expr" and isinstance(v, str)] + [
            e for k, v in node.items() if k != "expr" for e in _exprs(v)]
    if isinstance(node, list):
        return [e for v in node for e in _exprs(v)]
    return []


def test_issue_16_host_variable_filters_every_query() -> None:
    d = json.loads(DASHBOARD.read_text())
    host = next(v for v in d["templating"]["list"] if v["name"] == "host")
    assert host["includeAll"] and host["multi"] and host["allValue"] == ".*"
    assert "label_values(supervisor_rung" in host["definition"]
    exprs = _exprs(d["panels"]) + _exprs(d["annotations"])
    assert len(exprs) > 40
    unfiltered = [e for e in exprs if re.search(r'job=~"\$\w+"', e)
                  and 'host=~"$host"' not in e]
    assert unfiltered == []
    # Every selector that names a job also names the host, once per selector.
    for e in exprs:
        assert e.count('job=~"$') == e.count('host=~"$host"'), e

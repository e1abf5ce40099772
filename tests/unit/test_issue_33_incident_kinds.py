"""Issue 33: ``supervisor_incidents_total`` carries every (kind, severity) an incident can
be recorded with at 0 from the start, so the first incident of a kind is an increase
(the incidents annotation and the rules use ``increase()``). The list
(``show/incident_kinds.py``) is checked against every literal kind and severity in the
package's code."""

from __future__ import annotations

import ast
from pathlib import Path

from prometheus_client import CollectorRegistry

from agent_supervisor.decide.decision import Action
from agent_supervisor.show.incident_kinds import KNOWN_INCIDENTS
from agent_supervisor.show.metrics import SupervisorMetrics
from agent_supervisor.states import CrashReason

PACKAGE = Path(__file__).resolve().parents[2] / "agent_supervisor"
def _sev(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "Severity":
        return {node.attr.lower()}
    if isinstance(node, ast.IfExp):
        return _sev(node.body) | _sev(node.orelse)
    return set()


def pairs(package: Path) -> set[tuple[str, str]]:
    """(kind, severity) of every literal ``Finding(GUARD, "kind", Severity.X, ...)``,
    ``Incident(kind="k", severity=...)``, ``("kind", Severity.X, ...)`` tuple (a failed
    start's class) and ``kind, severity = "k", "s"`` in the package."""
    out = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                kw = {k.arg: k.value for k in node.keywords}
                if node.func.id == "Finding" and len(node.args) > 2 \
                        and isinstance(node.args[1], ast.Constant):
                    out |= {(node.args[1].value, s) for s in _sev(node.args[2])}
                if node.func.id == "Incident" and isinstance(kw.get("kind"), ast.Constant):
                    out |= {(kw["kind"].value, s) for s in _sev(kw["severity"])}
            if isinstance(node, ast.Tuple) and len(node.elts) >= 2 \
                    and isinstance(node.elts[0], ast.Constant) \
                    and isinstance(node.elts[0].value, str) \
                    and isinstance(node.elts[1], ast.Attribute) \
                    and getattr(node.elts[1].value, "id", None) == "Severity":
                out |= {(node.elts[0].value, s) for s in _sev(node.elts[1])}
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) \
                    and isinstance(node.value, ast.Tuple):
                names = [getattr(t, "id", None) for t in node.targets[0].elts]
                if names[:2] == ["kind", "severity"]:
                    out |= {(node.value.elts[0].value, s) for s in _sev(node.value.elts[1])}
    return out


def test_issue_33_the_scan_finds_guards_service_incidents_and_start_classes() -> None:
    found = pairs(PACKAGE)
    assert {("engine_hung", "critical"), ("memory_floor", "emergency"),
            ("nv_err_no_memory", "info"), ("stream_resumed", "warning"),
            ("startup_cuda_graph_oom", "critical"), ("unclean_stop", "warning"),
            ("host_reset", "critical"), ("policy_reloaded", "info")} <= found


def test_issue_33_every_incident_the_code_can_record_is_known() -> None:
    known = set(KNOWN_INCIDENTS)
    assert sorted(pairs(PACKAGE) - known) == []
    assert {(str(r), "critical") for r in CrashReason} <= known
    assert ("step_down", "info") in known and ("hold", "info") not in known
    assert len(KNOWN_INCIDENTS) == len(known)
    assert all(s in ("info", "warning", "critical", "emergency") for _, s in known)
    assert {str(a) for a in Action} - {k for k, _ in known} == {"hold"}


def test_issue_33_every_known_incident_series_exists_at_zero() -> None:
    registry = CollectorRegistry()
    SupervisorMetrics(registry)
    for kind, severity in KNOWN_INCIDENTS:
        assert registry.get_sample_value("supervisor_incidents_total", {
            "kind": kind, "severity": severity}) == 0.0, (kind, severity)

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


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """A module's ``NAME = "literal"`` assignments (``KIND = "supervision_mode"``)."""
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}


def _recorders(tree: ast.Module) -> dict[str, str]:
    """A module's helpers that record an incident of the kind they are given: functions
    whose first parameter (after ``self``) is ``kind`` and that take ``severity`` with a
    literal default (``_record(self, kind, ..., *, severity="info")``), by name -> default."""
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        args = node.args
        names = [a.arg for a in args.args if a.arg != "self"]
        defaults = dict(zip([a.arg for a in args.kwonlyargs], args.kw_defaults, strict=True))
        defaults |= dict(zip([a.arg for a in args.args][-len(args.defaults):] if args.defaults
                             else [], args.defaults, strict=True))
        severity = defaults.get("severity")
        if names[:1] == ["kind"] and isinstance(severity, ast.Constant):
            out[node.name] = severity.value
    return out


def _kind(node: ast.AST | None, consts: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    return None


def pairs(package: Path) -> set[tuple[str, str]]:
    """(kind, severity) of every literal ``Finding(GUARD, "kind", Severity.X, ...)``,
    ``Incident(kind="k", severity=...)``, ``("kind", Severity.X, ...)`` tuple (a failed
    start's class) and ``kind, severity = "k", "s"`` in the package; a kind may also be a
    module's string constant (``Incident(kind=KIND, ...)``), and a module's own recording
    helper called with a literal kind counts (``self._record("adopt_ambiguous", ...,
    severity="warning")``, its default severity otherwise)."""
    out = set()
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        consts, recorders = _string_constants(tree), _recorders(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
                kw = {k.arg: k.value for k in node.keywords}
                func = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                if func == "Finding" and len(node.args) > 2 \
                        and (kind := _kind(node.args[1], consts)) is not None:
                    out |= {(kind, s) for s in _sev(node.args[2])}
                if func == "Incident" and (kind := _kind(kw.get("kind"), consts)) is not None:
                    out |= {(kind, s) for s in _sev(kw["severity"])}
                if func in recorders and node.args \
                        and (kind := _kind(node.args[0], consts)) is not None:
                    severity = _sev(kw["severity"]) if "severity" in kw else {recorders[func]}
                    out |= {(kind, s) for s in severity}
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
            ("host_reset", "critical"), ("policy_reloaded", "info"),
            # a module's constant as the kind; a recording helper with a literal kind
            ("supervision_mode", "info"), ("top_rung", "info"),
            ("adopt_ambiguous", "warning"), ("adopted_engine_restarted", "info")} <= found


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

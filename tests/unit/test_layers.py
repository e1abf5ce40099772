"""The folder graph (issue 18): telemetry -> sense -> decide -> act -> record -> show, the
gateway beside them, the base modules under all, the service and its commands on top.

A lower floor never imports a higher one; ``decide/`` imports only telemetry, the
policy modules, states and itself (it stays pure). Every ``import`` in every module is
read with ``ast`` (inside functions and ``TYPE_CHECKING`` blocks too), so a new arrow
the wrong way fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "agent_supervisor"

#: Shared vocabulary, importable from every floor; they import only one another.
BASE = frozenset({"__init__", "errors", "states", "policy", "policy_guards", "policy_gateway",
                  "policy_nodes", "policy_container",
                  "policy_base", "policy_holder", "policy_yaml", "policy_thresholds", "policy_spec",
                  "policy_paths", "privacy", "serve", "serve_limits", "engine_flags",
                  "resources"})
#: The floors, lowest first: each may import the base and the floors below it.
FLOORS = ("telemetry", "sense", "decide", "act", "record", "show")
#: Beside the floors: what each may import besides the base.
BESIDE = {
    "gateway": {"telemetry", "sense"},
    "load": set(),
    "demo": set(),
}
#: On top, lowest first: each may import everything below it.
TOP = ("runtime", "agent", "calibrate", "chaos", "service", "commands", "cli", "__main__")
#: decide/ is pure: no floor but telemetry, no base module but these.
DECIDE_MAY = {"telemetry", "policy", "policy_guards", "policy_thresholds", "states"}


def allowed(src: str) -> set[str]:
    """The top-level parts of ``supervisor`` that part ``src`` may import."""
    if src == "decide":
        return DECIDE_MAY | {"decide"}
    if src in BASE:
        return set(BASE)
    if src in FLOORS:
        return set(BASE) | set(FLOORS[: FLOORS.index(src) + 1])
    if src in BESIDE:
        return set(BASE) | BESIDE[src] | {src}
    below = set(BASE) | set(FLOORS) | set(BESIDE)
    return below | set(TOP[: TOP.index(src) + 1])


def part_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE).parts
    return rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level part of supervisor) for every import of ``supervisor.*``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "agent_supervisor":  # from agent_supervisor import X: part or name
                names = [f"agent_supervisor.{a.name}" if (PACKAGE / a.name).is_dir()
                         or (PACKAGE / f"{a.name}.py").is_file() else "agent_supervisor"
                         for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "agent_supervisor" and len(parts) > 1:
                out.append((node.lineno, parts[1]))
            elif parts[0] == "agent_supervisor":
                out.append((node.lineno, "__init__"))
    return out


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_part_has_a_place() -> None:
    known = BASE | set(FLOORS) | set(BESIDE) | set(TOP)
    assert {part_of(p) for p in MODULES} <= known


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_issue_18_imports_follow_the_floors(path: Path) -> None:
    src = part_of(path)
    bad = [f"{path.relative_to(PACKAGE)}:{line} imports supervisor.{dst}"
           for line, dst in imports(path) if dst not in allowed(src)]
    assert bad == []


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: an act -> show import and a decide -> sense import are seen."""
    probe = tmp_path / "probe.py"
    probe.write_text("from agent_supervisor.show.alerts import Alerter\n"
                     "def f():\n    from agent_supervisor.sense import probes\n")
    found = [dst for _, dst in imports(probe)]
    assert found == ["show", "sense"]
    assert "show" not in allowed("act") and "sense" not in allowed("decide")
    assert "decide" in allowed("show") and "telemetry" in allowed("sense")


#: Size limits of issue 18 (STYLE.md section 4: most modules under ~300 lines, a function
#: on one screen); the argument parser is one long table and may be longer.
MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_SERVICE_LINES = 450, 60, 250
LONG_FUNCTIONS_ALLOWED = {("cli.py", "_parser")}


def test_issue_18_no_module_or_function_too_long() -> None:
    long = []
    for path in MODULES:
        rel = str(path.relative_to(PACKAGE))
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long.append(f"{rel}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES and (rel, node.name) not in LONG_FUNCTIONS_ALLOWED:
                    long.append(f"{rel}:{node.lineno} {node.name}: {n} lines")
    assert long == []
    assert len((PACKAGE / "service.py").read_text().splitlines()) < MAX_SERVICE_LINES

"""The folder graph (issue 18) and the file graph (issue 30).

Folders: telemetry -> sense -> decide -> act -> record -> show, the gateway beside them,
the base modules under all, the service and its commands on top. A lower floor never
imports a higher one; ``decide/`` imports only telemetry, the policy modules, states and
itself (it stays pure).

Files: no import cycle between modules anywhere in the package (inside every folder, among
the base modules, across folders). A cycle is a strongly connected set of files in the
graph of every import; a ``TYPE_CHECKING`` or in-function import counts like any other (a
loop through one is still a loop a reader must hold in mind, and one refactor away from a
circular import at run time).

Every ``import`` in every module is read with ``ast`` (inside functions and
``TYPE_CHECKING`` blocks too; relative imports resolved; ``from pkg import name`` is an
arrow to ``pkg/name.py`` where that is a module), so a new arrow the wrong way fails here.

Sizes (STYLE.md section 4, issue 30: guidance, not a cap that decides where a file is cut):
a module past 600 lines or a function past 80 lines fails; above 450 lines or 60 lines it
is reported (printed, ``pytest -s`` shows it), so a split is made for the reader's sake.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "agent_supervisor"

#: Shared vocabulary, importable from every floor; they import only one another
#: (``policy`` is the package agent_supervisor/policy/, every module in it).
BASE = frozenset({"__init__", "errors", "states", "policy", "privacy", "serve", "serve_limits",
                  "resources", "logs"})
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
#: decide/ is pure: no floor but telemetry, no base module but these, and of the policy
#: package only the modules it needs (``policy.<module>``; never the package itself, whose
#: ``__init__`` re-exports the loading and the holder).
DECIDE_MAY = {"telemetry", "policy.model", "policy.sections", "states"}
#: What decide/ never reaches, directly or through other files (telemetry's window
#: included): loading a policy (the policy arrives as an argument), the package that
#: re-exports the loading, the gateway's URL and its certificate.
DECIDE_NEVER = {"agent_supervisor.policy", "agent_supervisor.policy.load",
                "agent_supervisor.policy.yaml", "agent_supervisor.policy.paths",
                "agent_supervisor.policy.urls"}


def allowed(src: str) -> set[str]:
    """The top-level parts of ``supervisor`` that part ``src`` may import (for decide/,
    the policy's modules by name: ``policy.model``)."""
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
    """(line, top-level part of supervisor) for every import of ``supervisor.*``; an
    import of a module of the policy package is ``policy.<module>`` (``policy`` alone: the
    package itself)."""
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
            if parts[:2] == ["agent_supervisor", "policy"] and len(parts) > 2:
                out.append((node.lineno, f"policy.{parts[2]}"))
            elif parts[0] == "agent_supervisor" and len(parts) > 1:
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
           for line, dst in imports(path) if not permitted(src, dst)]
    assert bad == []


def permitted(src: str, dst: str) -> bool:
    """Whether part ``src`` may import ``dst`` (a part, or ``policy.<module>``)."""
    if src == "decide":
        return dst in allowed(src)
    return dst.partition(".")[0] in allowed(src)


def test_issue_30_decide_reaches_no_loading() -> None:
    """Through every file it imports, decide/ reaches none of ``DECIDE_NEVER`` (the pure
    decision gets the policy as an argument; it never loads one)."""
    graph = file_graph(PACKAGE)
    seen: set[str] = set()
    todo = [m for m in graph if m.startswith("agent_supervisor.decide")]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph[node])
    assert seen & DECIDE_NEVER == set()


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: an act -> show import and a decide -> sense import are seen."""
    probe = tmp_path / "probe.py"
    probe.write_text("from agent_supervisor.show.alerts import Alerter\n"
                     "def f():\n    from agent_supervisor.sense import probes\n")
    found = [dst for _, dst in imports(probe)]
    assert found == ["show", "sense"]
    assert "show" not in allowed("act") and "sense" not in allowed("decide")
    assert "decide" in allowed("show") and "telemetry" in allowed("sense")
    probe.write_text("from agent_supervisor.policy import Policy\n"
                     "from agent_supervisor.policy.load import load_policy\n"
                     "from agent_supervisor.policy.model import Mode\n")
    found = [dst for _, dst in imports(probe)]
    assert found == ["policy", "policy.load", "policy.model"]
    assert [permitted("decide", d) for d in found] == [False, False, True]
    assert all(permitted("act", d) for d in found)


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """``agent_supervisor/gateway/proxy.py`` -> ``agent_supervisor.gateway.proxy`` (a
    package's ``__init__.py`` is the package)."""
    rel = path.relative_to(package.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def file_imports(path: Path, me: str, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) for every import of a module of ``modules`` (name -> path) in
    ``path`` (module ``me``): runtime, in-function and ``TYPE_CHECKING`` imports alike;
    ``from a.b import c`` is an arrow to ``a.b.c`` where that is a module, else to
    ``a.b``; ``import a.b.c`` to the longest prefix that is a module; relative imports
    are resolved."""
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: list[tuple[int, str]] = []

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [known(a.name) for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else known(base)
                       for a in node.names]
        out.extend((node.lineno, t) for t in dict.fromkeys(targets) if t and t != me)
    return out


def file_graph(package: Path) -> dict[str, dict[str, list[int]]]:
    """module -> {module it imports: [lines]} over every module under ``package``."""
    modules = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, dict[str, list[int]]] = {m: {} for m in modules}
    for name, path in modules.items():
        for line, dst in file_imports(path, name, modules):
            graph[name].setdefault(dst, []).append(line)
    return graph


def cycles(graph: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """The strongly connected sets of two modules or more (Tarjan's algorithm, iterative),
    each sorted, the list sorted: every file-level import cycle lies inside one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        members.append(top)
                        if top == node:
                            break
                    if len(members) > 1:
                        found.append(sorted(members))
    return sorted(found)


def describe(graph: dict[str, dict[str, list[int]]], members: list[str]) -> str:
    """One cycle: its files and each arrow between them with the lines that make it."""
    short = {m: m.removeprefix("agent_supervisor.") for m in members}
    arrows = [f"  {short[a]} -> {short[b]} (line {', '.join(map(str, lines))})"
              for a in members for b, lines in graph[a].items() if b in short]
    return "cycle of " + ", ".join(short.values()) + ":\n" + "\n".join(arrows)


def test_issue_30_no_file_level_import_cycle() -> None:
    """No file imports itself through others, anywhere in the package (each cycle found
    is printed with the arrows and lines that make it)."""
    graph = file_graph(PACKAGE)
    found = [describe(graph, c) for c in cycles(graph)]
    for text in found:
        print(text)
    print(f"file graph: {len(graph)} modules, {sum(map(len, graph.values()))} arrows, "
          f"{len(found)} cycles")
    assert found == []


def test_the_cycle_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The checker itself: a loop through a ``TYPE_CHECKING`` import, one through an
    in-function relative import and one through ``from pkg import module`` are each
    found; a package that only points one way has none."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "b.py": "import pkg.a\n",
        "c.py": "def f():\n    from .sub.d import g\n",
        "sub/__init__.py": "",
        "sub/d.py": "from pkg import c\n",
        "e.py": "from pkg.sub import d\nfrom pkg import a\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = file_graph(pkg)
    assert graph["pkg.sub.d"] == {"pkg.c": [1]}
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.sub.d"]]
    (pkg / "b.py").write_text("x = 1\n")
    (pkg / "sub/d.py").write_text("import pkg.sub\n")
    assert cycles(file_graph(pkg)) == []


#: Sizes (STYLE.md section 4, issue 30): past these a module or function fails.
MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_SERVICE_LINES = 600, 80, 250
#: Above these it is reported, not failed: worth a look, not a reason to cut a file.
NOTE_MODULE_LINES, NOTE_FUNCTION_LINES = 450, 60
#: The argument parser is one long table and may be longer.
LONG_FUNCTIONS_ALLOWED = {("cli.py", "_parser")}


def test_no_module_or_function_too_long() -> None:
    """Fails past 600 lines a module or 80 lines a function; prints those above 450/60."""
    long: list[str] = []
    noted: list[str] = []
    for path in MODULES:
        rel = str(path.relative_to(PACKAGE))
        text = path.read_text()
        n = len(text.splitlines())
        if n > NOTE_MODULE_LINES:
            (long if n > MAX_MODULE_LINES else noted).append(f"{rel}: {n} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > NOTE_FUNCTION_LINES and (rel, node.name) not in LONG_FUNCTIONS_ALLOWED:
                    (long if n > MAX_FUNCTION_LINES else noted).append(
                        f"{rel}:{node.lineno} {node.name}: {n} lines")
    for line in noted:
        print(f"long (reported, not failed): {line}")
    assert long == []
    assert len((PACKAGE / "service.py").read_text().splitlines()) < MAX_SERVICE_LINES

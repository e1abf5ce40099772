"""Test modules import no other test module and no conftest (issue 30 item 5).

What several test files share lives in tests/helpers/ (one topic module each, its docstring
says what it offers). A test module that imports another (``from tests.process.test_launcher
import wait_for``) ties the two together: renaming or deleting the first breaks the second,
and pytest's collection of the first runs inside the second. A conftest is pytest's to
load; its importable pieces live in tests/helpers/ too.

The scan reads every file under tests/ with ``ast``, imports at the top and inside
functions alike, relative ones resolved against the file's package.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent

# Files other engineers were writing when the helpers moved (issues 29, 31, 32): they still
# import the old way, which works (each moved name is imported back into its old module;
# test_issue_31_stacks and test_issue_32_top_rung still hold helpers their neighbours
# import). Their owners move those to tests/helpers/ and rewrite the imports; each entry
# must go then (a stale entry fails the test).
WAITING_ON_OWNERS: set[str] = set()


def forbidden(module: str) -> bool:
    """Is ``module`` (dotted, absolute) a test module or a conftest under tests/?"""
    parts = module.split(".")
    if parts[0] != "tests" or len(parts) < 2:
        return False
    return parts[-1] == "conftest" or parts[-1].startswith("test_")


def package_of(path: Path) -> list[str]:
    """The dotted package a file under tests/ lives in, as parts (``["tests", "unit"]``)."""
    return list(path.resolve().relative_to(ROOT).parent.parts)


def bad_imports(source: str, package: list[str]) -> list[tuple[int, str]]:
    """(line, module) for each import in ``source`` of a test module or a conftest.

    ``package`` resolves relative imports (``from .test_x import y`` in tests/unit).
    ``from tests.process import test_launcher`` counts as importing that module.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if forbidden(a.name)]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if forbidden(module):
                found.append((node.lineno, module))
            else:
                found += [(node.lineno, f"{module}.{a.name}") for a in node.names
                          if forbidden(f"{module}.{a.name}")]
    return sorted(found)


def scan() -> dict[str, list[str]]:
    """file -> ["file:line imports module", ...] for every offending file under tests/."""
    out: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        hits = bad_imports(path.read_text(encoding="utf-8"), package_of(path))
        if hits:
            out[rel] = [f"{rel}:{line} imports {module}" for line, module in hits]
    return out


def test_no_test_module_imports_another_test_module_or_a_conftest():
    found = scan()
    offending = [line for rel, lines in found.items() if rel not in WAITING_ON_OWNERS
                 for line in lines]
    assert not offending, (
        "import shared pieces from tests/helpers/, not from a test module or conftest:\n"
        + "\n".join(offending))


def test_every_file_waiting_on_its_owner_still_needs_to_be_waited_on():
    found = scan()
    stale = sorted(rel for rel in WAITING_ON_OWNERS if rel not in found)
    assert not stale, f"clean now, drop from WAITING_ON_OWNERS: {stale}"


def test_the_scanner_finds_planted_imports():
    source = (
        "import os\n"
        "from tests.helpers.waiting import wait_for\n"
        "from tests.unit.scenario import POLICY\n"
        "from tests.process.test_launcher import launcher_for\n"
        "def f():\n"
        "    from tests.conftest import ROOT\n"
        "    import tests.api.conftest\n"
        "from tests.process import test_gateway\n"
        "from .test_executor import FakeEngine\n"
        "from . import conftest\n"
    )
    assert bad_imports(source, ["tests", "unit"]) == [
        (4, "tests.process.test_launcher"),
        (6, "tests.conftest"),
        (7, "tests.api.conftest"),
        (8, "tests.process.test_gateway"),
        (9, "tests.unit.test_executor"),
        (10, "tests.unit.conftest"),
    ]
    assert bad_imports("from tests.helpers.fakes import FakeEngine\n", ["tests", "unit"]) == []

"""Issue 33, "Dependencies": every runtime dependency pyproject.toml declares is one the
package imports (``aiohttp`` was declared, and installed with six packages of its own,
long after the gateway's upstream client replaced it), and the SQLAlchemy floor is the
first release that loads the store's models.

The floors themselves are tested by ``make test-floors`` (every runtime dependency at its
floor's release series, then tests/unit and tests/property); this file only keeps the
declared list honest."""

from __future__ import annotations

import ast
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(spec) for spec in project["dependencies"]]


def imported_modules(package: Path) -> set[str]:
    """Top-level module names the package imports: ``import x``, ``from x import y`` and
    ``importlib.import_module("x")`` (how the GPU sensor loads pynvml on demand)."""
    found: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "import_module" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                found.add(str(node.args[0].value).split(".")[0])
    return found


def test_issue_33_every_runtime_dependency_is_imported_by_the_package() -> None:
    by_module = packages_distributions()       # import name -> the distributions giving it
    used = {canonicalize_name(dist) for module in imported_modules(ROOT / "agent_supervisor")
            for dist in by_module.get(module, ())}
    declared = [canonicalize_name(r.name) for r in _runtime_requirements()]
    assert "sqlalchemy" in declared and "pydantic" in declared
    assert sorted(d for d in declared if d not in used) == [], (
        "declared in pyproject.toml's dependencies but imported nowhere in agent_supervisor/: "
        "drop it (and run make lock), or say why it must stay")


def test_issue_33_the_sqlalchemy_floor_loads_the_store_models() -> None:
    """2.0.0-2.0.32 refuse record/models.py at import ("Could not locate SQLAlchemy Core
    type for Python type list['Any'] inside the 'argv' attribute Mapped annotation");
    2.0.33 loads it (checked with each installed beside the lock, 2026-12-03)."""
    (sqlalchemy,) = [r for r in _runtime_requirements()
                     if canonicalize_name(r.name) == "sqlalchemy"]
    assert not sqlalchemy.specifier.contains(Version("2.0.32"))
    assert sqlalchemy.specifier.contains(Version("2.0.33"))

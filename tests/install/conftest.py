"""Issue 28: the wheel, built once per session from a copy of the source, and fresh virtual
environments to install it into, run from a directory with no checkout in sight.

Every test here is marked ``install``. The build runs pip's build isolation (setuptools
and wheel from pip's index: the development environment has setuptools 65 without
``wheel``, which cannot build a wheel by itself); the first test's environment takes the
dependencies from the index too, as ``pipx install`` does. Both need the index that
`make setup` used; measured here: build 3 s, dependencies 14 s.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers.install import PIP_TIMEOUT_S, clean_env, make_venv, run, site_packages  # noqa: F401  (moved; importers use tests.helpers)
from tests.helpers.paths import ROOT

#: What the wheel is built from (the package's data/ links point into the three folders).
SOURCES = ("pyproject.toml", "README.md", "agent_supervisor", "migrations", "dashboards",
           "policies")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.install)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built by ``pip wheel --no-deps`` from a copy of the source (the build
    writes build/ and *.egg-info beside the source: never into the shared checkout)."""
    src = tmp_path_factory.mktemp("source")
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=skip)
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, src], cwd=src,
        timeout=PIP_TIMEOUT_S)
    (built,) = dist.glob("agent_serving_supervisor-*.whl")
    return built

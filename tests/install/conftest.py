"""Issue 28: the wheel, built once per session from a copy of the source, and fresh virtual
environments to install it into, run from a directory with no checkout in sight.

Every test here is marked ``install``. The build runs pip's build isolation (setuptools
and wheel from pip's index: the development environment has setuptools 65 without
``wheel``, which cannot build a wheel by itself); the first test's environment takes the
dependencies from the index too, as ``pipx install`` does. Both need the index that
`make setup` used; measured here: build 3 s, dependencies 14 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

#: What the wheel is built from (the package's data/ links point into the three folders).
SOURCES = ("pyproject.toml", "README.md", "agent_supervisor", "migrations", "dashboards",
           "policies")
#: pip on a loaded 2-core box: a build or an install of a few packages.
PIP_TIMEOUT_S = 300


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.install)


def run(argv: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``argv``; AssertionError with its output when it fails."""
    out = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, f"{argv} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out


def clean_env(venv: Path) -> dict[str, str]:
    """This environment with ``venv/bin`` first on PATH and nothing that would put the
    checkout or the development venv on ``sys.path``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV",
                        "PYTHONSAFEPATH", "PYTEST_CURRENT_TEST")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def make_venv(path: Path) -> Path:
    """A new virtual environment (with pip) at ``path``, from this Python's base."""
    run([sys.executable, "-m", "venv", path], cwd=path.parent)
    return path


def site_packages(venv: Path) -> Path:
    (found,) = (venv / "lib").glob("python3.*/site-packages")
    return found


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

"""Fresh virtual environments for the install tests: ``make_venv(path)``, ``clean_env(venv)``
(an environment that leaves the checkout off sys.path), ``run(argv, cwd=...)`` (fails with the
output), ``site_packages(venv)`` and ``PIP_TIMEOUT_S``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: pip on a loaded 2-core box: a build or an install of a few packages.
PIP_TIMEOUT_S = 300


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

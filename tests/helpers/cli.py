"""The ``supervisor`` command as a subprocess: ``sup(*args)`` runs ``python -m agent_supervisor
ARGS`` from the checkout's root (60 s limit, output captured), ``cli_policy(tmp_path,
**sections)`` writes a one-mode fake-engine policy on free ports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers.paths import FAKE_ENGINE, ROOT
from tests.helpers.ports import free_ports


def sup(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent_supervisor", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, **kw)


def cli_policy(tmp_path: Path, **sections) -> Path:
    """A one-mode policy on the fake engine, every port free."""
    policy = tmp_path / "p.yaml"
    engine_port, gateway_port, admin_port = free_ports(3)
    policy.write_text(yaml.safe_dump({
        "fleet": "cli", "engine": {"executable": sys.executable, "args": [str(FAKE_ENGINE)],
                                   "port": engine_port, "shutdown_timeout_seconds": 1},
        "modes": [{"name": "only"}], "storage": {"state_directory": str(tmp_path / "s")},
        "gateway": {"port": gateway_port}, "admin": {"port": admin_port}, **sections}))
    return policy

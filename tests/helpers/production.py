"""``supervisor run`` as a real process on the fake engine: ``policy_file(tmp_path, **sections)``
writes a policy on free ports, ``start(path)`` runs the service (log in supervisor.log),
``status(path)`` reads /api/status, ``engines(path)`` lists its live fake engines,
``wait(what, predicate, timeout=20)`` polls (sync) until predicate gives a truthy value."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import yaml

from tests.helpers.paths import FAKE_ENGINE, ROOT
from tests.helpers.ports import free_ports


def policy_file(tmp_path: Path, **sections) -> Path:
    engine_port, gateway_port, admin_port = free_ports(3)
    data = {
        "fleet": "prod",
        "engine": {"executable": sys.executable, "args": [str(FAKE_ENGINE)],
                   "port": engine_port, "shutdown_timeout_seconds": 1,
                   "stop_grace_seconds": 1},
        "modes": [{"name": "fast", "args": {"--tokens": 3}},
                  {"name": "safe", "args": {"--tokens": 1}}],
        "sampling": {"tick_seconds": 0.2},
        "gateway": {"port": gateway_port}, "admin": {"port": admin_port},
        "recovery": {"watch_interval_seconds": 0.5},
        "storage": {"state_directory": str(tmp_path / "state")},
    }
    for k, v in sections.items():
        data[k] = {**data.get(k, {}), **v} if isinstance(v, dict) else v
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start(path: Path, env: dict | None = None) -> subprocess.Popen:
    """``supervisor run`` with its log appended to supervisor.log next to the policy."""
    with open(path.with_name("supervisor.log"), "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "agent_supervisor", "run", "--policy",
                                 str(path)], cwd=ROOT, stderr=log,
                                env={**os.environ, **(env or {})})


def wait(what: str, predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def status(path: Path) -> dict:
    port = yaml.safe_load(path.read_text())["admin"]["port"]
    return httpx.get(f"http://127.0.0.1:{port}/api/status", timeout=2).json()


def engines(path: Path) -> list[int]:
    """Live engine API servers of this policy (their command line names its port)."""
    port = str(yaml.safe_load(path.read_text())["engine"]["port"])
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if str(FAKE_ENGINE) in cmd and port in cmd and p.info["status"] != "zombie":
            found.append(p.pid)
    return found

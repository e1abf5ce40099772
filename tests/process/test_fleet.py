"""Issue 16, the fleet: two supervisors (two ``supervisor run`` processes, each with its
own state directory, host name and fake engine) write to one PostgreSQL; ``supervisor
fleet --database URL`` lists both with their rungs, engine states and heartbeat ages,
and their last incidents. A supervisor stopped cleanly reads as stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.paths import FAKE_ENGINE, ROOT
from tests.helpers.ports import free_port

pytestmark = pytest.mark.postgres


def _policy(tmp_path: Path, name: str, url: str, initial: str) -> Path:
    data = {
        "fleet": "agents",
        "engine": {"executable": sys.executable, "args": [str(FAKE_ENGINE)],
                   "port": free_port(), "start_timeout_seconds": 15,
                   "shutdown_timeout_seconds": 1, "stop_grace_seconds": 1},
        "modes": [{"name": "fast"}, {"name": "safe", "args": {"--max-num-seqs": 1}}],
        "initial_mode": initial,
        "gateway": {"enabled": False},
        "admin": {"port": free_port()},
        "sampling": {"tick_seconds": 0.5, "kernel_log": False},
        # A shared box's MemAvailable can sit under the shipped 6 GiB floor: not this
        # test's subject (seen: both fake engines killed as memory_floor emergencies).
        "guards": {"memory_floor": {"min_available_bytes": 256 * 2**20}},
        "storage": {"state_directory": str(tmp_path / name), "database_url": url,
                    "host_name": name, "heartbeat_seconds": 0.5},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_supervisor", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _members(url: str) -> list[dict]:
    out = _cli("fleet", "--database", url, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_issue_16_two_supervisors_on_one_postgres_listed_by_fleet(tmp_path: Path,
                                                                   pg_url: str) -> None:
    procs = []
    try:
        for name, initial in (("box-a", "fast"), ("box-b", "safe")):
            with open(tmp_path / f"{name}.log", "w") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "agent_supervisor", "run", "--policy",
                     str(_policy(tmp_path, name, pg_url, initial))], cwd=ROOT,
                    env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                    stderr=log))
        deadline = time.monotonic() + 60
        members: list[dict] = []
        while time.monotonic() < deadline:
            members = _members(pg_url)
            ready = {m["host"]: m for m in members if m["engine_state"] == "ready"}
            if set(ready) == {"box-a", "box-b"}:
                break
            time.sleep(1)
        by_host = {m["host"]: m for m in members}
        assert set(by_host) == {"box-a", "box-b"}, (members, (tmp_path / "box-a.log").read_text())
        assert (by_host["box-a"]["rung"], by_host["box-a"]["mode"]) == (0, "fast")
        assert (by_host["box-b"]["rung"], by_host["box-b"]["mode"]) == (1, "safe")
        for m in by_host.values():
            assert m["fleet"] == "agents" and m["supervisor"] == "alive"
            assert m["engine_state"] == "ready"
            assert m["heartbeat_age_seconds"] is not None and m["heartbeat_age_seconds"] < 30
        table = _cli("fleet", "--database", pg_url).stdout
        lines = {line.split()[0]: line for line in table.splitlines()[1:]}
        assert lines["box-a"].split()[2:5] == ["0", "fast", "ready"], table
        assert lines["box-b"].split()[2:5] == ["1", "safe", "ready"], table
        # box-b stops cleanly: the fleet says so, box-a stays alive.
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(timeout=30) == 0
        after = {m["host"]: m for m in _members(pg_url)}
        assert after["box-b"]["supervisor"] == "stopped"
        assert after["box-a"]["supervisor"] == "alive"
        assert _cli("fleet", "--database", pg_url, "--fleet", "other", "--json").stdout \
            .strip() == "[]"
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()

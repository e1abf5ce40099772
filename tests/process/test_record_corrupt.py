"""Issue 34: a corrupt ``supervisor.db`` stopped the service at start (exit 1, which
systemd reads as "gave up"). Now it is moved aside, the service runs on a fresh record
with a ``record_corrupt`` incident, and serves agents through the gateway. The real
``supervisor run`` on the fake engine, real SQLite files."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml

from agent_supervisor.errors import StoreError
from agent_supervisor.record.corrupt import is_corrupt, move_aside, sqlite_file
from agent_supervisor.record.store import Store
from tests.helpers.flood import CHAT_BODY
from tests.helpers.paths import FAKE_ENGINE, ROOT
from tests.helpers.ports import free_ports

GARBAGE = b"this is not a database, it is a torn write\n" * 200


def _open_error(url: str) -> StoreError:
    with pytest.raises(StoreError) as info:
        Store.open(url, fleet="f")
    return info.value


def test_issue_34_corruption_is_told_from_other_store_errors(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(GARBAGE)
    assert is_corrupt(_open_error(f"sqlite:///{garbage}"))
    # A real database with its pages torn: the schema page overwritten.
    torn = tmp_path / "torn.db"
    Store.open(f"sqlite:///{torn}", fleet="f").close()
    data = bytearray(torn.read_bytes())
    data[100:4096] = os.urandom(3996)
    torn.write_bytes(bytes(data))
    assert is_corrupt(_open_error(f"sqlite:///{torn}"))
    # A path SQLite cannot open (a directory), and PostgreSQL that is not there: not
    # corruption, and never moved.
    folder = tmp_path / "folder.db"
    folder.mkdir()
    assert not is_corrupt(_open_error(f"sqlite:///{folder}"))
    assert not is_corrupt(_open_error("postgresql+psycopg://nobody@127.0.0.1:1/none"))
    assert not is_corrupt(sqlite3.OperationalError("database is locked"))
    assert sqlite_file("postgresql+psycopg://u@h/db") is None
    assert sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file(f"sqlite:///{garbage}") == garbage


def test_issue_34_move_aside_keeps_the_file_and_its_companions(tmp_path: Path) -> None:
    db = tmp_path / "supervisor.db"
    db.write_bytes(GARBAGE)
    Path(f"{db}-wal").write_bytes(b"wal")
    now = datetime(2026, 12, 3, 14, 5, 6, tzinfo=UTC)
    moved = move_aside(db, now=now)
    assert moved == tmp_path / "supervisor.db.corrupt-20261203T140506Z"
    assert moved.read_bytes() == GARBAGE and Path(f"{moved}-wal").read_bytes() == b"wal"
    assert not db.exists() and not Path(f"{db}-wal").exists()
    db.write_bytes(b"again")
    assert move_aside(db, now=now).name == "supervisor.db.corrupt-20261203T140506Z-1"


def test_issue_34_a_corrupt_record_is_moved_aside_and_the_engine_served(
        tmp_path: Path) -> None:
    engine, gateway, admin = free_ports(3)
    state = tmp_path / "s"
    state.mkdir()
    (state / "supervisor.db").write_bytes(GARBAGE)
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump({
        "fleet": "corrupt", "engine": {"executable": sys.executable, "port": engine,
                                       "args": [str(FAKE_ENGINE), "--no-core"],
                                       "shutdown_timeout_seconds": 1},
        "modes": [{"name": "only"}], "storage": {"state_directory": str(state)},
        "sampling": {"tick_seconds": 0.5, "kernel_log": False},
        "gateway": {"port": gateway}, "admin": {"port": admin}}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "agent_supervisor", "run", "--policy",
                             str(policy)], cwd=ROOT, env=env, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        served = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                r = httpx.post(f"http://127.0.0.1:{gateway}/v1/chat/completions",
                               content=CHAT_BODY,
                               headers={"Content-Type": "application/json"}, timeout=5)
                if r.status_code == 200:
                    served = r.json()
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        assert proc.poll() is None, "the service exited"
        assert served is not None and served["choices"], "the engine was never served"
        incidents = []
        while time.monotonic() < deadline and not incidents:
            out = subprocess.run([sys.executable, "-m", "agent_supervisor", "incidents",
                                  "--policy", str(policy), "--json", "--kind",
                                  "record_corrupt"], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=60)
            incidents = json.loads(out.stdout or "[]")
            time.sleep(0.3)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    (aside,) = state.glob("supervisor.db.corrupt-*")
    assert aside.read_bytes() == GARBAGE
    (inc,) = incidents
    assert inc["severity"] == "critical" and str(aside) in inc["explanation"]
    assert inc["findings"][0]["moved_to"] == str(aside)
    assert "file is not a database" in inc["findings"][0]["error"]
    assert "moved aside to" in err

"""Shared fixtures: free ports, policies for the fake and the real engine, databases."""

from __future__ import annotations

import os
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import settings
from sqlalchemy import create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from agent_supervisor.policy import Policy, load_policy

# These machines are shared and the CPU engine starves other processes for seconds:
# a per-example deadline would fail on the box's load, not on the code.
settings.register_profile("supervisor", deadline=None)
settings.load_profile("supervisor")

ROOT = Path(__file__).resolve().parents[1]
FAKE_ENGINE = ROOT / "tests" / "helpers" / "fake_engine.py"
FIXTURES = ROOT / "tests" / "fixtures"
PG_URL = os.environ.get("SUPERVISOR_TEST_PG_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nobody listens on right now (all bound at once:
    ``free_port()`` called twice can answer the same port twice, seen as
    "admin.port 48011 is also engine.port" in a full run)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def fake_engine_policy(tmp_path: Path, *, fake_args: list[str] | None = None,
                       modes: list[dict] | None = None, **sections) -> Policy:
    """A policy whose engine is tests/helpers/fake_engine.py on a free port."""
    engine_port, gateway_port, admin_port = free_ports(3)
    data = {
        "fleet": "test",
        "engine": {
            "executable": sys.executable,
            "args": [str(FAKE_ENGINE), *(fake_args or [])],
            "port": engine_port,
            "start_timeout_seconds": 10,
            "shutdown_timeout_seconds": 1,
            "stop_grace_seconds": 1,
            "kill_timeout_seconds": 5,
        },
        "modes": modes or [{"name": "fast"}, {"name": "safe", "args": {"--max-num-seqs": 1}}],
        "gateway": {"port": gateway_port},
        "admin": {"port": admin_port},
        "storage": {"state_directory": str(tmp_path / "state")},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return load_policy(yaml.safe_dump(data), base_dir=tmp_path)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema, dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_URL, pool_pre_ping=True)  # survives a server restart in a test
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    except SQLAlchemyError as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL at {PG_URL} is not usable: {exc}")
    yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()

"""``fake_engine_policy``: a loaded ``Policy`` whose engine is tests/helpers/fake_engine.py
on free ports (engine, gateway, admin), with any section overridden by keyword."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from agent_supervisor.policy import Policy, load_policy
from tests.helpers.paths import FAKE_ENGINE
from tests.helpers.ports import free_ports


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

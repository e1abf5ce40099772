"""Issue 34: finite absurd values (``heartbeat_seconds: 1e12``) passed the policy and
broke ``supervisor run`` with a traceback; scenario files with ``tick_seconds: 0`` or
``-1`` looped forever. Every number now has an upper bound, refused naming the file,
the field and the reason."""

from __future__ import annotations

import math
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_supervisor.cli import main as cli_main
from agent_supervisor.commands.schema import policy_schema
from agent_supervisor.decide.replay import load_scenario, replay_scenario
from agent_supervisor.errors import PolicyError
from agent_supervisor.policy import load_policy, load_policy_file
from agent_supervisor.policy.base import MAX_SECONDS
from tests.helpers.paths import ROOT
from tests.helpers.ports import free_port

BASE: dict[str, Any] = {"fleet": "f", "engine": {"executable": "vllm"}, "modes": [{"name": "a"}]}

# Free-form engine arguments are checked by the flag rules, not by the models.
FREE_FORM = {"args"}


def unbounded_numbers(node: Any, path: str = "") -> list[str]:
    """Paths in the policy's JSON Schema of a number or integer without a maximum."""
    found: list[str] = []
    if isinstance(node, dict):
        if node.get("type") in ("number", "integer") and "maximum" not in node \
                and "exclusiveMaximum" not in node:
            found.append(path)
        for key, value in node.items():
            if key in FREE_FORM:
                continue
            found += unbounded_numbers(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += unbounded_numbers(value, f"{path}[{i}]")
    return found


def test_issue_34_every_number_of_the_policy_has_an_upper_bound() -> None:
    assert unbounded_numbers(policy_schema()) == []


def _with(section: str, key: str, value: Any) -> str:
    data = {**BASE}
    if section == "engine":
        data["engine"] = {**data["engine"], key: value}
    elif section == "modes":
        data["modes"] = [{"name": "a", "gateway": {key: value}}]
    else:
        data[section] = {key: value}
    return yaml.safe_dump(data)


ABSURD = [
    ("storage", "heartbeat_seconds", 1e12, "less than or equal to 604800"),
    ("storage", "retention_interval_seconds", 1e15, "less than or equal to 604800"),
    ("storage", "incident_retention_days", 1e9, "less than or equal to 3650"),
    ("storage", "engine_logs_keep", 10**12, "less than or equal to 1000000"),
    ("storage", "spool_max_bytes", 2**70, "less than or equal to"),
    ("engine", "start_timeout_seconds", 1e300, "less than or equal to 604800"),
    ("engine", "shutdown_timeout_seconds", 10**10, "less than or equal to 604800"),
    ("engine", "stop_grace_seconds", -1, "greater than or equal to 0"),
    ("sampling", "tick_seconds", 0, "greater than 0"),
    ("sampling", "tick_seconds", -1, "greater than 0"),
    ("sampling", "window_seconds", 1e12, "less than or equal to 604800"),
    ("hysteresis", "calm_seconds", 1e12, "less than or equal to 604800"),
    ("hysteresis", "max_transitions_per_hour", 10**9, "less than or equal to 1000000"),
    ("restart", "start_limit_burst", 10**9, "less than or equal to 1000000"),
    ("gateway", "hold_timeout_seconds", 1e12, "less than or equal to 604800"),
    ("gateway", "max_connections", 10**9, "less than or equal to 1000000"),
    ("modes", "max_prompt_tokens", 10**12, "less than or equal to 100000000"),
    ("alerts", "min_interval_seconds", 1e12, "less than or equal to 604800"),
]


@pytest.mark.parametrize(("section", "key", "value", "reason"), ABSURD)
def test_issue_34_absurd_values_are_refused_naming_the_field(
        section: str, key: str, value: Any, reason: str, tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(_with(section, key, value))
    with pytest.raises(PolicyError) as info:
        load_policy_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert f".{key}: " in message or f"{section}.{key}" in message, message
    assert reason in message, message


def test_issue_34_policy_check_refuses_without_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(_with("storage", "heartbeat_seconds", 1e12))
    assert cli_main(["policy", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"error: {path}: storage.heartbeat_seconds: Input should be less "
                           "than or equal to 604800 (got 1000000000000.0)")


@pytest.mark.parametrize("path", sorted((ROOT / "policies").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_issue_34_the_shipped_policies_are_within_the_bounds(path: Path) -> None:
    policy = load_policy_file(path)
    assert policy.storage.heartbeat_seconds <= MAX_SECONDS


SCENARIO_ABSURD = [
    ({"tick_seconds": 0}, "tick_seconds", "greater than or equal to 0.001"),
    ({"tick_seconds": -1}, "tick_seconds", "greater than or equal to 0.001"),
    ({"tick_seconds": 1e-9}, "tick_seconds", "greater than or equal to 0.001"),
    ({"tick_seconds": math.nan}, "tick_seconds", "finite number"),
    ({"duration_seconds": 1e12}, "duration_seconds", "less than or equal to 604800"),
    ({"duration_seconds": 1000.01, "tick_seconds": 0.01}, "(top)", "100,000 ticks"),
    ({"on_start": []}, "on_start", "at least 1 item"),
    ({"events": [{"at_s": -5}]}, "events.0.at_s", "greater than or equal to 0"),
    ({"on_start": [{"exit_code": 10**30}]}, "on_start.0.exit_code", "less than or equal"),
    ({"memory_returns_after_seconds": math.inf}, "memory_returns_after_seconds", "finite"),
]


@pytest.mark.parametrize(("data", "field", "reason"), SCENARIO_ABSURD)
def test_issue_34_absurd_scenarios_are_refused_naming_the_field(
        data: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(ValueError) as info:
        load_scenario(data, source="s.yaml")
    message = str(info.value)
    assert message.startswith(f"s.yaml: {field}: "), message
    assert reason in message, message


def test_issue_34_a_scenario_at_the_bound_loads_and_a_short_one_ends(tmp_path: Path) -> None:
    """100,000 ticks load; a scenario of 1,000 ticks of 0.01 s runs to its end (the real
    decide() on each tick) in bounded time."""
    load_scenario({"duration_seconds": 1000, "tick_seconds": 0.01}, source="s")
    policy = load_policy(yaml.safe_dump(BASE), base_dir=tmp_path)
    spec = load_scenario({"duration_seconds": 10, "tick_seconds": 0.01}, source="s")
    t0 = time.monotonic()
    steps = replay_scenario(spec, policy)
    assert len(steps) == 1_001
    assert time.monotonic() - t0 < 60


def test_issue_34_run_with_an_absurd_value_exits_2_and_starts_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gateway = free_port()
    data = {**BASE, "gateway": {"port": gateway}, "storage": {
        "heartbeat_seconds": 1e12, "state_directory": str(tmp_path / "s")}}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli_main(["run", "--policy", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: storage.heartbeat_seconds: " in err and "Traceback" not in err
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", gateway), timeout=2).close()
    assert not (tmp_path / "s").exists()

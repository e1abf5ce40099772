"""Issue 33, the CLI as an operator coming from llama-swap or LiteLLM expects it: shell
completion, ``--json`` on every command a script reads, ``$SUPERVISOR_POLICY`` for the
database commands. Each runs the real ``supervisor`` command in a subprocess."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_supervisor.cli import _parser
from agent_supervisor.policy import load_policy_file
from agent_supervisor.record.models import ModeTransitionRow
from agent_supervisor.record.store import Store
from tests.helpers.admin_stub import StubService, serving, status_of
from tests.helpers.cli import cli_policy, sup
from tests.helpers.policies import fake_engine_policy


def subcommand_names(parser: argparse.ArgumentParser) -> set[str]:
    """Every subcommand name of ``parser``, nested ones (``policy check``) included."""
    names: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                names |= {name, *subcommand_names(child)}
    return names


def bash(script: str, commands: str) -> str:
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", f"source /dev/stdin <<'EOF_'\n"
                          f"{script}\nEOF_\n{commands}"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_issue_33_bash_completion_is_set_and_knows_every_subcommand() -> None:
    out = sup("completion", "bash")
    assert out.returncode == 0, out.stderr
    names = subcommand_names(_parser())
    assert {"history", "pin", "completion", "check", "schema", "init"} <= names
    for name in names:
        assert name in out.stdout, name
    said = bash(out.stdout, """
        complete -p supervisor
        ask() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _supervisor;
                echo "${COMPREPLY[*]}"; }
        ask supervisor hist
        ask supervisor policy ""
        ask supervisor step ""
        ask supervisor --log-level ""
        ask supervisor incidents --js
    """).splitlines()
    assert said[0] == "complete -o filenames -F _supervisor supervisor"
    assert said[1:] == ["history", "check schema init -h --help", "up down -h --help --json --url "
                        "--policy --token-file --timeout", "debug info warning error",
                        "--json"]


def test_issue_33_zsh_and_fish_completion_name_every_subcommand() -> None:
    names = subcommand_names(_parser())
    zsh, fish = sup("completion", "zsh"), sup("completion", "fish")
    assert zsh.returncode == fish.returncode == 0
    assert "bashcompinit" in zsh.stdout and "complete -o filenames -F _supervisor" in zsh.stdout
    for name in names:
        assert f" -a {name} " in fish.stdout, name
    assert "complete -c supervisor -n '__fish_seen_subcommand_from incidents' -l since -r -F" \
        in fish.stdout
    assert sup("completion", "tcsh").returncode == 2


def with_transitions(tmp_path: Path) -> Path:
    """A policy file whose database holds two mode transitions."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = cli_policy(tmp_path)
    policy = load_policy_file(path)
    store = Store.open(policy.database_url, fleet=policy.fleet,
                       host=policy.storage.host_name)
    now = datetime.now(UTC)
    with store.session() as s:
        for n, (frm, to) in enumerate([(None, "only"), ("only", "only")]):
            s.add(ModeTransitionRow(
                fleet=store.fleet, host=store.host, at=now - timedelta(seconds=60 - n),
                from_mode=frm, to_mode=to, from_rung=None if frm is None else 0, to_rung=0,
                actor="operator", reason=f"test {n}", incident_id=None))
    store.close()
    return path


def test_issue_33_history_json_is_one_object(tmp_path: Path) -> None:
    out = sup("history", "--policy", str(with_transitions(tmp_path)), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [t["reason"] for t in doc["transitions"]] == ["test 0", "test 1"]
    assert doc["transitions"][1]["from_mode"] == "only"


def test_issue_33_policy_check_json_valid_and_not(tmp_path: Path) -> None:
    out = sup("policy", "check", "policies/cpu-demo.yaml", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["valid"] is True and doc["fleet"] == "cpu-demo"
    assert [r["mode"] for r in doc["ladder"]][-1] == "safe" and doc["ladder"][0]["initial"]
    assert "--port" in doc["engine_argv"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("fleet: f\nengine: {executable: vllm}\nmodes:\n"
                   "  - {name: a, args: {--gpu-memory-utilization: 1.5}}\n")
    out = sup("policy", "check", str(bad), "--json")
    assert out.returncode == 2
    doc = json.loads(out.stdout)
    assert doc["valid"] is False and "--gpu-memory-utilization must be a fraction" in \
        doc["error"]


@pytest.mark.parametrize(("argv", "expected"), [
    (["pin", "safe"], {"action": "pin", "pinned": "safe"}),
    (["unpin"], {"action": "unpin", "pinned": None}),
    (["step", "down"], {"action": "step-down", "requested": "safe"}),
    (["pause"], {"action": "pause", "paused": True}),
    (["resume"], {"action": "resume", "paused": False}),
    (["restart"], {"action": "restart", "mode": "fast"}),
])
def test_issue_33_every_lever_prints_one_json_object(tmp_path: Path, argv: list[str],
                                                     expected: dict) -> None:
    policy = fake_engine_policy(tmp_path)
    token = tmp_path / "token"
    token.write_text("lever-token\n")
    service = StubService(policy=policy, store=Store.open(policy.database_url,
                                                          fleet=policy.fleet),
                          log_path=tmp_path / "engine.log", st=status_of(policy))
    with serving(service, token="lever-token") as url:
        out = sup(*argv, "--json", "--url", url, "--token-file", str(token))
    service.store.close()
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc.items() >= expected.items(), doc


def test_issue_33_database_commands_read_supervisor_policy(tmp_path: Path) -> None:
    path = with_transitions(tmp_path)
    env = {**os.environ, "SUPERVISOR_POLICY": str(path)}
    out = sup("history", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["transitions"]) == 2
    for argv in (["incidents", "--json"], ["runs", "--json"],
                 ["export", "--what", "transitions", "--format", "json"]):
        out = sup(*argv, env=env)
        assert out.returncode == 0, (argv, out.stderr)
        json.loads(out.stdout)
    other = with_transitions(tmp_path / "other")                  # --policy still wins
    assert sup("history", "--policy", str(other), "--json", env=env).returncode == 0
    bare = {k: v for k, v in os.environ.items() if k != "SUPERVISOR_POLICY"}
    out = sup("history", env=bare)
    assert out.returncode == 2 and "--policy" in out.stderr
    assert "$SUPERVISOR_POLICY" in sup("history", "--help", env=bare).stdout

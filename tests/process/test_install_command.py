"""Issue 19: ``supervisor install`` / ``uninstall`` against a temporary root (no real
systemd, no useradd), the unit verified with ``systemd-analyze verify``, and ``supervisor
policy schema``."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent_supervisor.act.systemd import DEFAULT_USER
from agent_supervisor.policy import load_policy_file
from tests.helpers.paths import ROOT

POLICY = """\
fleet: agents-a
engine:
  executable: /opt/vllm/bin/vllm
  args: [serve, /srv/models/qwen]
  working_directory: /srv
modes:
  - name: fast
  - name: safe
    args: {--max-num-seqs: 4}
"""


def sup(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent_supervisor", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "etc" / "agent-supervisor").mkdir(parents=True)
    (tmp_path / "etc" / "agent-supervisor" / "agents-a.yaml").write_text(POLICY)
    return tmp_path


def test_issue_19_install_into_a_root_then_uninstall(root: Path) -> None:
    policy = root / "etc" / "agent-supervisor" / "agents-a.yaml"
    out = sup("install", "--policy", str(policy), "--root", str(root))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == ("skipped (--root): useradd --system --home-dir "
                        "/var/lib/agent-supervisor/agents-a --no-create-home --shell "
                        f"/usr/sbin/nologin {DEFAULT_USER}")
    assert "skipped (--root): systemctl daemon-reload" in lines
    assert "skipped (--root): systemctl enable --now agent-supervisor-agents-a" in lines
    state = root / "var" / "lib" / "agent-supervisor" / "agents-a"
    assert state.is_dir() and mode(state) == 0o700
    env = root / "etc" / "agent-supervisor" / "agents-a.env"
    assert mode(env) == 0o600
    token = env.read_text().split("=", 1)[1].strip()
    assert env.read_text().startswith("SUPERVISOR_ADMIN_TOKEN=") and len(token) >= 40
    assert token not in out.stdout + out.stderr                 # never printed
    unit = root / "etc" / "systemd" / "system" / "agent-supervisor-agents-a.service"
    text = unit.read_text()
    assert mode(unit) == 0o644
    assert "ExecStart=" + str(Path(sys.executable).parent / "supervisor") + \
        " run --policy /etc/agent-supervisor/agents-a.yaml" in text
    assert "StateDirectory=agent-supervisor/agents-a\n" in text
    assert "EnvironmentFile=/etc/agent-supervisor/agents-a.env\n" in text
    assert f"User={DEFAULT_USER}\n" in text and "/etc/agent-supervisor/agents-a\n" not in text
    analyze = shutil.which("systemd-analyze")
    if analyze is not None:                # /usr/bin/systemd-analyze here (systemd 252)
        v = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                           timeout=60)
        assert v.returncode == 0 and v.stdout + v.stderr == "", v.stdout + v.stderr
    again = sup("install", "--policy", str(policy), "--root", str(root))
    assert again.returncode == 0 and "admin token: /etc/agent-supervisor/agents-a.env " \
        "exists, kept" in again.stdout
    assert env.read_text().split("=", 1)[1].strip() == token     # idempotent
    gone = sup("uninstall", "--policy", str(policy), "--root", str(root))
    assert gone.returncode == 0, gone.stderr
    assert not unit.exists() and not env.exists() and state.is_dir()
    assert "kept: /var/lib/agent-supervisor/agents-a (database, engine logs)" in gone.stdout
    purge = sup("uninstall", "--policy", str(policy), "--root", str(root), "--purge")
    assert purge.returncode == 0 and not state.exists()
    assert f"skipped (--root): userdel {DEFAULT_USER}" in purge.stdout


def test_issue_19_install_writes_the_policys_token_file_and_refuses_state_in_etc(
        root: Path) -> None:
    policy = root / "etc" / "agent-supervisor" / "agents-a.yaml"
    policy.write_text(POLICY + "admin: {token_file: agents-a.token}\n")
    out = sup("install", "--policy", str(policy), "--root", str(root), "--no-start")
    assert out.returncode == 0, out.stderr
    token = root / "etc" / "agent-supervisor" / "agents-a.token"
    assert mode(token) == 0o600 and len(token.read_text().strip()) >= 40
    unit = (root / "etc/systemd/system/agent-supervisor-agents-a.service").read_text()
    assert "EnvironmentFile" not in unit
    assert "skipped (--root): systemctl enable agent-supervisor-agents-a" in out.stdout
    policy.write_text(POLICY + "storage: {state_directory: state}\n")
    bad = sup("install", "--policy", str(policy), "--root", str(root))
    assert bad.returncode == 1
    assert "the state directory /etc/agent-supervisor/state is under /etc" in bad.stderr


def test_issue_19_state_directory_default_outside_etc(tmp_path: Path) -> None:
    p = tmp_path / "agents-a.yaml"
    p.write_text(POLICY)
    assert load_policy_file(p, environ={}).state_directory == tmp_path / ".supervisor"
    under_systemd = load_policy_file(p, environ={"STATE_DIRECTORY": "/var/lib/x:/var/lib/y"})
    assert under_systemd.state_directory == Path("/var/lib/x")
    p.write_text(POLICY + "storage: {state_directory: mine}\n")           # the file wins
    assert load_policy_file(p, environ={"STATE_DIRECTORY": "/var/lib/x"}).state_directory \
        == tmp_path / "mine"


def test_issue_19_policy_schema_command_prints_the_shipped_schema() -> None:
    out = sup("policy", "schema")
    assert out.returncode == 0, out.stderr
    assert out.stdout == (ROOT / "policies" / "policy.schema.json").read_text()

"""The unit file ``supervisor systemd-unit`` prints (issue 17), checked by systemd's own
tools where they are installed: ``systemd-analyze verify`` parses it (and reports an
ExecStart= path it cannot execute, so a badly escaped path fails), ``systemd-analyze
security --offline=yes`` scores it (8.5 EXPOSED before this issue)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent_supervisor.act.systemd import systemd_escape, unit_file
from agent_supervisor.errors import PolicyError
from agent_supervisor.policy import load_policy_file

ROOT = Path(__file__).resolve().parents[2]
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed")


def odd_place(tmp_path: Path) -> tuple[Path, Path]:
    """A policy and an executable under paths with a space, a specifier and a $."""
    base = tmp_path / "pol 100%d"
    base.mkdir()
    exe = base / "bin$x" / "super visor"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    text = (ROOT / "policies" / "cpu-demo.yaml").read_text().replace(
        "state_directory: ../.supervisor/cpu-demo", f"state_directory: '{base}/st a%i'")
    text = text.replace("  token_env: SUPERVISOR_ADMIN_TOKEN\n",
                        "  token_env: SUPERVISOR_ADMIN_TOKEN\n  token_file: 'admin token'\n")
    policy = base / "p$x.yaml"
    policy.write_text(text.replace("working_directory: ..", f"working_directory: '{ROOT}'"))
    return policy, exe


def units(tmp_path: Path) -> list[Path]:
    policy, exe = odd_place(tmp_path)
    out = []
    for name, path in (("supervisor-odd", policy), ("supervisor-demo",
                                                    ROOT / "policies" / "cpu-demo.yaml")):
        unit = tmp_path / f"{name}.service"
        unit.write_text(unit_file(load_policy_file(path), path, executable=str(exe)))
        out.append(unit)
    return out


def test_issue_17_escaping() -> None:
    assert systemd_escape("/srv/a b/%i") == '"/srv/a b/%%i"'
    assert systemd_escape('/x"y\\z') == '"/x\\"y\\\\z"'
    assert systemd_escape("/plain/path") == "/plain/path"


def test_issue_17_the_unit_is_hardened(tmp_path: Path) -> None:
    odd, _ = units(tmp_path)
    text = odd.read_text()
    for line in ("PrivateTmp=yes", "UMask=0077", "ProtectHome=read-only", "ProtectSystem=strict",
                 "NoNewPrivileges=yes", "LimitNOFILE=65536", "RestartPreventExitStatus=1 2",
                 "Restart=on-failure", "StartLimitBurst=5", "CapabilityBoundingSet=CAP_SYSLOG",
                 "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
                 "RuntimeDirectory=supervisor-cpu-demo", "User=supervisor"):
        assert f"\n{line}\n" in text, line
    assert "PrivateDevices" not in text and "ProtectKernelLogs" not in text
    assert 'ReadWritePaths="' in text and "%%i" in text and "bin$x/super visor\" run" in text
    assert "p$$x.yaml" in text
    assert f'\nLoadCredential=admin_token:"{odd.parent}/pol 100%%d/admin token"\n' in text


def test_issue_17_dynamic_user_needs_a_state_directory_under_var_lib(tmp_path: Path) -> None:
    path = ROOT / "policies" / "cpu-demo.yaml"
    with pytest.raises(ValueError, match="DynamicUser=yes needs"):
        unit_file(load_policy_file(path), path, user="dynamic")
    text = (path.read_text().replace("state_directory: ../.supervisor/cpu-demo",
                                     "state_directory: /var/lib/supervisor/cpu-demo"))
    (tmp_path / "p.yaml").write_text(text.replace("working_directory: ..",
                                                  f"working_directory: '{ROOT}'"))
    unit = unit_file(load_policy_file(tmp_path / "p.yaml"), tmp_path / "p.yaml", user="dynamic")
    assert "\nDynamicUser=yes\n" in unit and "\nStateDirectory=supervisor/cpu-demo\n" in unit
    assert "ReadWritePaths" not in unit and "User=" not in unit.replace("DynamicUser=", "")


def test_issue_17_an_infinite_timeout_is_refused_before_the_unit(tmp_path: Path) -> None:
    text = (ROOT / "policies" / "cpu-demo.yaml").read_text().replace(
        "start_timeout_seconds: 240", "start_timeout_seconds: inf")
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(PolicyError, match=r"engine\.start_timeout_seconds"):
        load_policy_file(tmp_path / "p.yaml")


@needs_analyze
def test_issue_17_systemd_analyze_verify_and_security(tmp_path: Path) -> None:
    odd, demo = units(tmp_path)
    out = subprocess.run([ANALYZE, "verify", str(odd), str(demo)], capture_output=True,
                         text=True, timeout=60)
    # verify checks that ExecStart='s program exists and is executable: a wrongly
    # escaped "super visor" under "bin$x" would be reported here.
    assert out.returncode == 0 and "not executable" not in out.stderr, out.stderr
    scores = []
    for unit in (odd, demo):
        sec = subprocess.run([ANALYZE, "security", "--offline=yes", str(unit)],
                             capture_output=True, text=True, timeout=60)
        m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", sec.stdout)
        assert m, sec.stdout[-500:]
        scores.append(float(m.group(1)))
    print(f"systemd-analyze security --offline=yes: {scores}")
    assert max(scores) <= 3.0                # 8.5 EXPOSED before issue 17

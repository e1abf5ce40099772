"""Issue 34: the directives of both generated units, present whatever the host has (the
scores and the capability itself are checked for real in tests/process/test_systemd_unit_scores.py).
"""

from __future__ import annotations

from pathlib import Path

from agent_supervisor.act.systemd import unit_file
from agent_supervisor.act.systemd_gateway import GATEWAY_HARDENING, gateway_service_unit
from agent_supervisor.policy import load_policy_file

ROOT = Path(__file__).resolve().parents[2]
POLICY_PATH = ROOT / "policies" / "cpu-demo.yaml"


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_issue_34_the_gateway_unit_is_confined_like_a_network_service() -> None:
    unit = lines(
        gateway_service_unit(
            load_policy_file(POLICY_PATH), POLICY_PATH, executable="/usr/bin/supervisor"
        )
    )
    for line in (
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "AmbientCapabilities=",
        "PrivateDevices=yes",
        "ProtectKernelLogs=yes",
        "ProtectClock=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectControlGroups=yes",
        "ProtectProc=invisible",
        "ProcSubset=pid",
        "RestrictNamespaces=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "SystemCallArchitectures=native",
        "SystemCallFilter=@system-service",
        "SystemCallFilter=~@privileged @resources",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "UMask=0077",
    ):
        assert line in unit, line
    assert [x for x in GATEWAY_HARDENING if not x.startswith("#")] == [
        x for x in unit if x in GATEWAY_HARDENING and not x.startswith("#")
    ]
    assert not any(x.startswith("ReadWritePaths=") and x.split("=", 1)[1] == "/" for x in unit)
    # What it still needs: its state directory and the scheduling systemd gives it.
    assert any(x.startswith("ReadWritePaths=") for x in unit)
    assert "CPUSchedulingPolicy=rr" in unit


def test_issue_34_the_supervisor_unit_holds_cap_syslog_and_nothing_else() -> None:
    unit = lines(
        unit_file(load_policy_file(POLICY_PATH), POLICY_PATH, executable="/usr/bin/supervisor")
    )
    assert "CapabilityBoundingSet=CAP_SYSLOG" in unit
    assert "AmbientCapabilities=CAP_SYSLOG" in unit
    assert "NoNewPrivileges=yes" in unit
    assert not any(
        x.startswith(("ProtectKernelLogs", "PrivateDevices", "SupplementaryGroups")) for x in unit
    )
    deny = next(x for x in unit if x.startswith("SystemCallFilter=~"))
    assert "syslog" in deny.split()  # syslog(2): clear/redirect, not needed

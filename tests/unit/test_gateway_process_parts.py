"""Issue 14, item 2: the parts of the gateway's own process that need no process: the
sockets it takes over (a predecessor's hand-over, systemd's LISTEN_* only when
LISTEN_PID is this process) and its systemd units."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from agent_supervisor.act import systemd, systemd_gateway
from agent_supervisor.gateway import process
from agent_supervisor.policy import load_policy_file

ROOT = Path(__file__).resolve().parents[2]


def test_handed_over_sockets_are_told_apart_by_family_and_the_variables_removed(
        tmp_path: Path) -> None:
    tcp = socket.socket()
    unix = socket.socket(socket.AF_UNIX)
    try:
        env = {process.HANDOVER_ENV: f"{tcp.fileno()},{unix.fileno()}", "OTHER": "1"}
        got = process.inherited_sockets(env)
        assert got["gateway"].fileno() == tcp.fileno()
        assert got["control"].fileno() == unix.fileno()
        assert env == {"OTHER": "1"}
        assert not got["gateway"].get_inheritable()
        for s in got.values():
            s.detach()                      # the originals still own the fds
    finally:
        tcp.close()
        unix.close()


def test_listen_fds_of_another_process_are_not_taken() -> None:
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "2"}
    assert process.inherited_sockets(env) == {}
    assert "LISTEN_FDS" not in env          # sd_listen_fds(unset_environment=1)


def test_the_socket_unit_listens_where_the_gateway_and_the_supervisor_look() -> None:
    policy = load_policy_file(ROOT / "policies" / "cpu-demo.yaml")
    text = systemd_gateway.gateway_socket_unit(policy)
    gw = policy.gateway
    assert f"ListenStream={gw.host}:{gw.port}\n" in text
    assert systemd_gateway.CONTROL_SOCKET == process.CONTROL_SOCKET
    assert f"ListenStream={policy.state_directory / process.CONTROL_SOCKET}\n" in text
    assert "SocketMode=0600" in text
    service = systemd_gateway.gateway_service_unit(policy, ROOT / "policies" / "cpu-demo.yaml")
    assert " gateway --policy " in service and "NotifyAccess=all" in service
    assert "ExecReload=/bin/kill -HUP $MAINPID" in service
    assert f"Requires={systemd_gateway.gateway_unit_name(policy)}.socket" in service
    # The supervisor's scheduling, which the gateway it starts inherits (issue 14).
    supervisor_unit = systemd.unit_file(policy, ROOT / "policies" / "cpu-demo.yaml")
    for line in ("CPUSchedulingPolicy=rr", "CPUSchedulingPriority=5", "OOMScoreAdjust=-900"):
        assert f"\n{line}\n" in service and f"\n{line}\n" in supervisor_unit


def test_an_owned_gateway_is_orphaned_when_its_socket_file_goes_or_no_one_speaks() -> None:
    bound = (64768, 1234)
    quiet = {"silent_seconds": 5.0, "timeout_seconds": None}
    assert process.orphaned(bound, bound, **quiet) is None          # waits for one
    assert "is gone" in (process.orphaned(bound, None, **quiet) or "")
    assert "another file" in (process.orphaned(bound, (64768, 99), **quiet) or "")
    assert process.orphaned(bound, bound, silent_seconds=5.0, timeout_seconds=6) is None
    assert "for 6 s" in (process.orphaned(bound, bound, silent_seconds=6.0,
                                          timeout_seconds=6) or "")

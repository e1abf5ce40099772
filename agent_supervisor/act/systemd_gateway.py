"""systemd units for the gateway on its own: a ``.socket`` that holds its listening
sockets (socket activation, systemd.socket(5)) and the ``.service`` it activates.

systemd then owns the agents' port: connections queue in the kernel while the gateway
process restarts (crash, ``systemctl restart``), and the supervisor's unit can stop,
crash or be upgraded without touching either. The socket unit listens on the gateway's
``host:port`` and on the control socket ``<state>/gateway.sock``, so the supervisor's
first connection to the control socket starts the gateway too. The gateway takes both
(sd_listen_fds(3): fd 3 and 4; agent_supervisor/gateway/process.py). ``ExecReload`` (SIGHUP)
hands the sockets to a new process of the gateway with nothing dropped; the successor
tells systemd its pid (``MAINPID=``, so ``NotifyAccess=all``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent_supervisor.act.systemd import DEFAULT_USER, LIMIT_NOFILE, SCHEDULING, systemd_escape
from agent_supervisor.policy import Policy

__all__ = [
    "CONTROL_SOCKET",
    "GATEWAY_HARDENING",
    "gateway_service_unit",
    "gateway_socket_unit",
    "gateway_unit_name",
]

#: The control socket's name in the state directory: agent_supervisor/gateway/process.py's
#: (act/ does not import the gateway; tests/unit/test_systemd_gateway.py checks both).
CONTROL_SOCKET = "gateway.sock"


#: The gateway faces the network and needs the least: its listening sockets come from systemd
#: (or it binds them itself), it connects to the engine and reads its policy, and it writes
#: only its state directory (``ReadWritePaths=``). No devices, no kernel log, no signals to
#: other processes, no privileged or scheduling system calls (its real-time scheduling is set
#: by systemd before they are filtered). ``systemd-analyze security`` scores the unit 8.7
#: EXPOSED without these lines (issue 34) and at the supervisor's level with them. Sources:
#: systemd.exec(5), systemd.resource-control(5); the system call groups are
#: ``systemd-analyze syscall-filter``'s.
GATEWAY_HARDENING = (
    "# Hardening: the process that faces the network is the most confined (issue 34).",
    "NoNewPrivileges=yes",
    "CapabilityBoundingSet=",
    "AmbientCapabilities=",
    "PrivateTmp=yes",
    "PrivateDevices=yes",
    "DevicePolicy=closed",
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "ProtectClock=yes",
    "ProtectControlGroups=yes",
    "ProtectKernelLogs=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelTunables=yes",
    "ProtectHostname=yes",
    "ProtectProc=invisible",
    "ProcSubset=pid",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    "RestrictNamespaces=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "RemoveIPC=yes",
    "PrivateMounts=yes",
    "SystemCallArchitectures=native",
    "SystemCallFilter=@system-service",
    "SystemCallFilter=~@privileged @resources",
    "SystemCallErrorNumber=EPERM",
)


def gateway_unit_name(policy: Policy) -> str:
    """``supervisor-<fleet>-gateway`` (add ``.socket`` / ``.service``)."""
    return f"supervisor-{policy.fleet}-gateway"


def _listen_address(policy: Policy) -> str:
    host, port = policy.gateway.host, policy.gateway.port
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def gateway_socket_unit(policy: Policy, *, user: str | None = None) -> str:
    """The ``.socket`` unit: the gateway's TCP listener and its control socket (0600,
    owned by the service user)."""
    name = gateway_unit_name(policy)
    account = None if user in ("root", "dynamic") else (user or DEFAULT_USER)
    lines = [
        "[Unit]",
        f"Description=Agents' gateway sockets for fleet {policy.fleet}",
        "",
        "[Socket]",
        f"ListenStream={_listen_address(policy)}",
        f"ListenStream={systemd_escape(str(policy.state_directory / CONTROL_SOCKET))}",
        "# Connections wait here while the gateway restarts (nginx's default is 511).",
        "Backlog=2048",
        "SocketMode=0600",
        *([f"SocketUser={systemd_escape(account)}"] if account else []),
        "RemoveOnStop=yes",
        f"Service={name}.service",
        "",
        "[Install]",
        "WantedBy=sockets.target",
    ]
    return "\n".join(lines) + "\n"


def gateway_service_unit(
    policy: Policy, policy_path: Path, *, executable: str | None = None, user: str | None = None
) -> str:
    """The ``.service`` the socket activates: ``supervisor gateway --policy FILE``."""
    exe = executable or str(Path(sys.argv[0]).resolve())
    prefix = [sys.executable, "-m", "agent_supervisor"] if exe.endswith("__main__.py") else [exe]
    name = gateway_unit_name(policy)
    gw = policy.gateway
    account = None if user in ("root", "dynamic") else (user or DEFAULT_USER)
    words = [*prefix, "gateway", "--policy", str(policy_path)]
    lines = [
        "[Unit]",
        f"Description=Agents' gateway for fleet {policy.fleet} (outlives the supervisor)",
        f"Requires={name}.socket",
        f"After={name}.socket network-online.target",
        "",
        "[Service]",
        "Type=notify",
        "# A hand-over (ExecReload) leaves a new process in charge: it sends MAINPID=.",
        "NotifyAccess=all",
        "ExecStart="
        + " ".join(
            systemd_escape(w).replace("$", "$$") if i else systemd_escape(w)
            for i, w in enumerate(words)
        ),
        "ExecReload=/bin/kill -HUP $MAINPID",
        f"WorkingDirectory={systemd_escape(str(policy.working_directory))}",
        *([f"User={systemd_escape(account)}"] if account else []),
        "Restart=always",
        "RestartSec=1",
        f"TimeoutStopSec={int(gw.drain_timeout_seconds + 30)}",
        "# Every agent request and every token of a stream passes here while the engine",
        "# saturates the CPU: the supervisor's own scheduling (the gateway it starts",
        "# inherits it), so the engine cannot starve the agents' path (issue 14).",
        f"CPUSchedulingPolicy={SCHEDULING[0]}",
        f"CPUSchedulingPriority={SCHEDULING[1]}",
        "OOMScoreAdjust=-900",
        f"LimitNOFILE={LIMIT_NOFILE}",
        f"ReadWritePaths={systemd_escape(str(policy.state_directory))}",
        "UMask=0077",
        *GATEWAY_HARDENING,
        "Environment=PYTHONUNBUFFERED=1",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"

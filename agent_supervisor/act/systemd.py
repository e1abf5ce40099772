"""systemd integration: sd_notify messages and the unit file.

``Notifier`` speaks the sd_notify protocol (sd_notify(3), "NOTIFY_SOCKET"): datagrams of
``KEY=value`` lines to the socket named by ``$NOTIFY_SOCKET`` (a path, or an abstract
socket when it starts with ``@``). Without the variable (not under systemd) every call
is a no-op. ``WATCHDOG_USEC`` (systemd.service(5), WatchdogSec=) sets how often the main
loop must ping.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path
from urllib.parse import quote

from agent_supervisor.policy import Policy

__all__ = ["DEFAULT_USER", "LIMIT_NOFILE", "SCHEDULING", "Notifier", "systemd_escape",
           "unit_file"]

logger = logging.getLogger(__name__)


class Notifier:
    """Sends READY=1, STATUS=..., WATCHDOG=1 and STOPPING=1 to systemd."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET")
        self.address: str | None = None
        if path:
            self.address = "\0" + path[1:] if path.startswith("@") else path
        usec = env.get("WATCHDOG_USEC")
        self.watchdog_seconds = int(usec) / 1e6 if usec and usec.isdigit() else None
        self._ready_sent = False
        self._last_status: str | None = None

    @property
    def enabled(self) -> bool:
        """Whether a systemd socket was given."""
        return self.address is not None

    def _send(self, message: str) -> None:
        if self.address is None:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.sendto(message.encode(), self.address)
        except OSError as exc:
            logger.warning("sd_notify %r failed: %s", message.split("=", 1)[0], exc)

    def ready(self, status: str | None = None) -> None:
        """READY=1, once (the first time the engine serves)."""
        if not self._ready_sent:
            self._ready_sent = True
            self._send("READY=1" + (f"\nSTATUS={status}" if status else ""))
            self._last_status = status

    def status(self, text: str) -> None:
        """STATUS=text when it changed (shown by ``systemctl status``)."""
        if text != self._last_status:
            self._last_status = text
            self._send(f"STATUS={text}")

    def extend_timeout(self, seconds: float) -> None:
        """EXTEND_TIMEOUT_USEC before READY=1: an engine (re)start may take this long, so
        several restarts and step downs before the first READY do not trip the unit's
        start timeout (sd_notify(3), systemd 236+)."""
        if not self._ready_sent:
            self._send(f"EXTEND_TIMEOUT_USEC={int(seconds * 1e6)}")

    def watchdog(self) -> None:
        """WATCHDOG=1: the main loop is alive."""
        if self.watchdog_seconds is not None:
            self._send("WATCHDOG=1")

    def stopping(self) -> None:
        """STOPPING=1: shutdown has begun."""
        self._send("STOPPING=1")


#: Descriptors the service may hold (LimitNOFILE=): the gateway's connections (each a
#: socket, plus one to the engine), the engine's log, SQLite and its WAL, the probes.
#: systemd's default soft limit of 1,024 was used up by 1,100 slow clients and the engine
#: could then not be spawned (issue 17); the gateway bounds its own connections below
#: this.
LIMIT_NOFILE = 65536
#: The supervisor's and the gateway's CPU scheduling in their units
#: (``CPUSchedulingPolicy=``, ``CPUSchedulingPriority=``): round-robin at a low real-time
#: priority, so a saturating engine cannot starve them (shared/CPU_ENGINE.md: ordinary
#: processes went unscheduled for 1-13 s; nice did not help, a real-time class did).
SCHEDULING = ("rr", 5)

#: The service user when none is named: a system account the operator creates once
#: (``useradd --system --home-dir /var/lib/supervisor --shell /usr/sbin/nologin
#: supervisor``, in the ``video`` and ``render`` groups where /dev/nvidia* needs them).
DEFAULT_USER = "supervisor"


def systemd_escape(value: str) -> str:
    """``value`` as one word of a unit setting: specifiers (``%``) doubled, and quoted
    C-style when it holds whitespace, quotes, backslashes or ``;`` (systemd.syntax(7))."""
    value = value.replace("%", "%%")
    if value and not any(c.isspace() or c in "\"'\\;" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _exec_word(value: str) -> str:
    """An argument of ExecStart=: also ``$`` doubled (systemd expands $VAR in the
    arguments; in the program's path it does not, as ``systemd-analyze verify`` shows)."""
    return systemd_escape(value).replace("$", "$$")


def unit_file(policy: Policy, policy_path: Path, *, executable: str | None = None,
              user: str | None = None) -> str:
    """A systemd unit for ``supervisor run --policy policy_path`` (systemd.service(5),
    systemd.exec(5)).

    Type=notify with READY=1 only once the engine serves, so ``TimeoutStartSec`` covers
    the engine's start-up; ``TimeoutStopSec`` covers the gateway's drain, vLLM's own
    ``--shutdown-timeout`` and the SIGKILL wait; ``KillMode`` lets the supervisor stop
    the engine itself (``mixed``: SIGTERM to the supervisor only), or leave it running
    for the next life to adopt (``process``, when ``recovery.on_restart`` is adopt).

    ``user``: ``User=`` (default ``DEFAULT_USER``, a documented system account);
    ``"dynamic"`` for ``DynamicUser=yes`` (then the state directory must be under
    /var/lib, made by ``StateDirectory=``); ``"root"`` for none (not recommended).
    ``Restart=on-failure`` with ``RestartPreventExitStatus=1 2``: the supervisor exits
    1 when it gave up (the safest mode kept crashing) and 2 for a bad policy, and both
    must stay down (issue 17: ``Restart=always`` restarted "give up" forever); the
    start limit (``StartLimitBurst=`` in ``StartLimitIntervalSec=``) bounds the rest.
    Hardening keeps /dev/nvidia* (NVML) and /dev/kmsg (CAP_SYSLOG, ``_HARDENING``) reachable,
    so no ``PrivateDevices=``, ``ProtectClock=`` or ``ProtectKernelLogs=`` (each narrows the
    device list). Paths are escaped (``%`` and spaces, ``$`` in ExecStart). Every
    ``*_file`` secret of the policy becomes a ``LoadCredential=`` (systemd.exec(5),
    "Credentials"), so the service user need not be able to read the file itself.

    Raises: ValueError for ``user="dynamic"`` with a state directory outside /var/lib.
    """
    exe = executable or str(Path(sys.argv[0]).resolve())
    # Run as ``python -m agent_supervisor``, argv[0] is __main__.py (not executable itself).
    prefix = ([sys.executable, "-m", "agent_supervisor"] if exe.endswith("__main__.py")
              else [exe])
    rst = policy.restart
    name = f"supervisor-{policy.fleet}"
    lines = [
        "[Unit]",
        f"Description=Agent-serving supervisor for fleet {policy.fleet}",
        "Documentation=file://" + quote(str(policy_path)).replace("%", "%%"),
        "After=network-online.target",
        "Wants=network-online.target",
        "# Give up for good after this many failed starts in the interval.",
        f"StartLimitIntervalSec={int(max(600, rst.start_limit_interval_seconds))}",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        "ExecStart=" + " ".join([systemd_escape(prefix[0]), *(_exec_word(w) for w in [
            *prefix[1:], "run", "--policy", str(policy_path)])]),
        "ExecReload=/bin/kill -HUP $MAINPID",
        f"WorkingDirectory={systemd_escape(str(policy.working_directory))}",
        *_service_user(policy, user),
        *_lifecycle(policy),
        *_directories(policy, name),
        *_credentials(policy),
        *_HARDENING,
        "Environment=PYTHONUNBUFFERED=1",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def _lifecycle(policy: Policy) -> list[str]:
    """Restarts, timeouts, kill mode, scheduling and limits (see ``unit_file``)."""
    eng, gw, rec = policy.engine, policy.gateway, policy.recovery
    start = int(eng.start_timeout_seconds + 60)
    stop = int(gw.drain_timeout_seconds + eng.shutdown_timeout_seconds + eng.stop_grace_seconds
               + eng.kill_timeout_seconds + 30)
    kill_mode = "process" if rec.on_restart == "adopt" else "mixed"
    return [
        "# Exit 1: the supervisor gave up (the safest mode kept crashing); exit 2: a bad",
        "# policy. Neither is restarted; any other failure is, within the start limit.",
        "Restart=on-failure",
        "RestartSec=5",
        "RestartPreventExitStatus=1 2",
        f"WatchdogSec={max(30, int(3 * policy.sampling.tick_seconds))}",
        f"TimeoutStartSec={start}",
        f"TimeoutStopSec={stop}",
        f"KillMode={kill_mode}",
        "# The supervisor must keep up while the engine saturates the CPU (seen: ordinary",
        "# processes unscheduled for 1-13 s under load). It runs round-robin at a low",
        "# real-time priority; it resets its engine to normal scheduling at launch.",
        f"CPUSchedulingPolicy={SCHEDULING[0]}",
        f"CPUSchedulingPriority={SCHEDULING[1]}",
        "OOMScoreAdjust=-900",
        f"LimitNOFILE={LIMIT_NOFILE}",
        "# Files 0600, directories 0700: database, WAL, logs, spool, traces (issue 17).",
        "UMask=0077",
    ]


def _service_user(policy: Policy, user: str | None) -> list[str]:
    """``User=`` / ``DynamicUser=`` lines (see ``unit_file``)."""
    if user == "dynamic":
        if not _under_var_lib(policy.state_directory):
            raise ValueError(f"DynamicUser=yes needs storage.state_directory under /var/lib "
                             f"(StateDirectory=), not {policy.state_directory}")
        return ["# A transient user made by systemd for this service (systemd.exec(5)).",
                "DynamicUser=yes"]
    if user == "root":
        return ["# Runs as root: prefer a service user (supervisor systemd-unit --user NAME)."]
    account = user or DEFAULT_USER
    return [f"# The service user: create it once with useradd --system --home-dir "
            f"/var/lib/{account}", f"# --shell /usr/sbin/nologin {account} (and add it to "
            "the video/render groups", "# where /dev/nvidia* needs them); the state "
            "directory must be owned by it.", f"User={systemd_escape(account)}"]


def _under_var_lib(path: Path) -> bool:
    return path.is_relative_to("/var/lib") and path != Path("/var/lib")


def _directories(policy: Policy, name: str) -> list[str]:
    """The state directory (``StateDirectory=`` under /var/lib, else ``ReadWritePaths=``),
    the runtime directory the engine's TMPDIR is made in, the cache directory."""
    state = policy.state_directory
    lines = ([f"StateDirectory={systemd_escape(str(state.relative_to('/var/lib')))}",
              "StateDirectoryMode=0700"] if _under_var_lib(state)
             else [f"ReadWritePaths={systemd_escape(str(state))}"])
    return [
        *lines,
        "# The engine's TMPDIR is made under it (short enough for vLLM's IPC sockets).",
        f"RuntimeDirectory={name}",
        "RuntimeDirectoryMode=0700",
        "RuntimeDirectoryPreserve=restart",
        "# vLLM, FlashInfer, Triton and the Hugging Face hub write their caches under",
        "# $HOME/.cache (torch.compile, JIT kernels): here, not in a home directory.",
        f"CacheDirectory={name}",
        f"Environment=HOME=%C/{name} XDG_CACHE_HOME=%C/{name}",
    ]


def _credentials(policy: Policy) -> list[str]:
    """``LoadCredential=`` for every ``*_file`` secret of the policy."""
    secret_files = {"database_url": policy.storage.database_url_file,
                    "webhook_url": policy.alerts.webhook_url_file,
                    "admin_token": policy.admin.token_file,
                    "engine_api_key": policy.engine.api_key_file}
    creds = [f"LoadCredential={name}:{systemd_escape(str(policy.resolve(path)))}"
             for name, path in secret_files.items() if path is not None]
    if creds:
        creds.insert(0, "# Secret files, read by systemd (as root) into $CREDENTIALS_DIRECTORY,"
                        " where the supervisor looks first.")
    return creds


#: Hardening that leaves NVML (/dev/nvidia*) and /dev/kmsg reachable. CAP_SYSLOG rather than
#: ``SupplementaryGroups=systemd-journal`` (issue 34): /dev/kmsg is the follower's first
#: source (no journald in the path, no delay), and the journal group would let the service
#: read every service's log; CAP_SYSLOG lets it open /dev/kmsg under dmesg_restrict
#: (kernel/printk/printk.c ``check_syslog_permissions``; Documentation/admin-guide/sysctl/
#: kernel.rst "dmesg_restrict") and read kernel addresses, while ``syslog(2)``, the only call
#: that could clear or redirect the ring buffer with it, is filtered out below. Ambient, so a
#: service ``User=`` holds it (capabilities(7)); children drop it (act/capabilities.py).
_HARDENING = [
    "# Hardening that leaves NVML (/dev/nvidia*) and /dev/kmsg reachable.",
    "NoNewPrivileges=yes",
    "# CAP_SYSLOG, and only it: with kernel.dmesg_restrict=1 (Ubuntu's default) opening",
    "# /dev/kmsg needs it, and without the kernel log the Xid, NV_ERR_NO_MEMORY and OOM",
    "# guards are blind. The engine and the gateway are started without it.",
    "CapabilityBoundingSet=CAP_SYSLOG",
    "AmbientCapabilities=CAP_SYSLOG",
    "PrivateTmp=yes",
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "ProtectControlGroups=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelTunables=yes",
    "ProtectHostname=yes",
    "ProtectProc=invisible",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    "RestrictNamespaces=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "SystemCallArchitectures=native",
    "PrivateMounts=yes",
    "# System calls neither the supervisor nor vLLM makes (CUDA and NVML go through",
    "# ioctl/mmap). Not @resources: the launcher sets the engine's scheduling, affinity",
    "# and priority, and vLLM binds memory to NUMA nodes. Refused with EPERM, not killed.",
    "SystemCallFilter=~@clock @cpu-emulation @debug @module @mount @obsolete @raw-io "
    "@reboot @swap syslog",
    "SystemCallErrorNumber=EPERM",
]

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
import shlex
import socket
import sys
from pathlib import Path

from supervisor.policy import Policy

__all__ = ["Notifier", "unit_file"]

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


def unit_file(policy: Policy, policy_path: Path, *, executable: str | None = None,
              user: str | None = None) -> str:
    """A systemd unit for ``supervisor run --policy policy_path`` (systemd.service(5)).

    Type=notify with READY=1 only once the engine serves, so ``TimeoutStartSec`` covers
    the engine's start-up; ``TimeoutStopSec`` covers the gateway's drain, vLLM's own
    ``--shutdown-timeout`` and the SIGKILL wait; ``KillMode`` lets the supervisor stop
    the engine itself (``mixed``: SIGTERM to the supervisor only), or leave it running
    for the next life to adopt (``process``, when ``recovery.on_restart`` is adopt).
    Hardening keeps /dev/nvidia* (NVML) and /dev/kmsg (kernel log) reachable.
    """
    exe = executable or str(Path(sys.argv[0]).resolve())
    eng, gw, rec = policy.engine, policy.gateway, policy.recovery
    start = int(eng.start_timeout_seconds + 60)
    stop = int(gw.drain_timeout_seconds + eng.shutdown_timeout_seconds + eng.stop_grace_seconds
               + eng.kill_timeout_seconds + 30)
    kill_mode = "process" if rec.on_restart == "adopt" else "mixed"
    state = policy.state_directory
    lines = [
        "[Unit]",
        f"Description=Agent-serving supervisor for fleet {policy.fleet}",
        "Documentation=file://" + str(policy_path),
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={shlex.join([exe, 'run', '--policy', str(policy_path)])}",
        "ExecReload=/bin/kill -HUP $MAINPID",
        f"WorkingDirectory={policy.working_directory}",
        *( [f"User={user}"] if user else []),
        "Restart=always",
        "RestartSec=5",
        f"WatchdogSec={max(30, int(3 * policy.sampling.tick_seconds))}",
        f"TimeoutStartSec={start}",
        f"TimeoutStopSec={stop}",
        f"KillMode={kill_mode}",
        "# The supervisor must keep up while the engine saturates the CPU (seen: ordinary",
        "# processes unscheduled for 1-13 s under load). It runs round-robin at a low",
        "# real-time priority; it resets its engine to normal scheduling at launch.",
        "CPUSchedulingPolicy=rr",
        "CPUSchedulingPriority=5",
        "OOMScoreAdjust=-900",
        "# Hardening that leaves NVML (/dev/nvidia*) and /dev/kmsg reachable. The engine",
        "# inherits it: no ProtectHome=, since vLLM, FlashInfer, Triton and the Hugging",
        "# Face hub write their caches under ~/.cache (torch.compile, JIT kernels).",
        "NoNewPrivileges=yes",
        "ProtectSystem=full",
        "ProtectControlGroups=yes",
        "ProtectKernelModules=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        f"ReadWritePaths={state}",
        "Environment=PYTHONUNBUFFERED=1",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"

"""``supervisor gateway --policy FILE``: the gateway as its own small process.

Agents' connections end at this process, not at the supervisor, so a supervisor that
crashes, is SIGKILLed, restarted or upgraded cuts none of them: the gateway keeps the
last limits it was given and keeps proxying to the engine (which outlives the supervisor
too: its own process group), and holds requests while no engine answers, within its
bounds (``hold_timeout_seconds``, ``max_held_requests``). The next supervisor attaches to
it over the control channel (agent_supervisor/gateway/control.py).

Sockets, in order of preference:

1. systemd's socket activation (sd_listen_fds(3): ``LISTEN_PID`` is this process,
   ``LISTEN_FDS`` sockets from fd 3): the TCP one is the gateway's listener, the Unix one
   the control channel (``supervisor systemd-unit --unit gateway-socket``);
2. a predecessor's hand-over (``SUPERVISOR_GATEWAY_FDS``: the fd numbers it passed);
3. bound here: ``gateway.host:port`` and ``<state>/gateway.sock`` (0600).

Its state (rung, held, shed) is saved to ``<state>/gateway-state.json`` at every change
and read at start, so a gateway restarted by systemd or handed over starts with the
last limits. Exit: SIGTERM (or ``POST /control/stop``) stops accepting, lets in-flight
requests finish (``drain_timeout_seconds``) and exits 0. SIGHUP (or ``POST
/control/stop {"handover": true}``) hands the sockets to a new process of the same
command first (a new build, if the files changed), waits until it serves, then drains
the same way: the kernel keeps queuing connections on the shared listening socket, so
nothing is refused meanwhile. While draining it follows the successor's state file, so
its held requests are released when the successor's are. Exit 2: the policy is bad,
a listener cannot be bound, or another gateway answers on the control socket.

A gateway its supervisor started (``--owner supervisor``) outlives that supervisor's
crash, restart or upgrade (the next one attaches), but not the end of its state
directory: once its control socket's path is gone or names another file, no supervisor
can reach it again, so it drains and exits 0 as at SIGTERM (checked every
``WATCH_SECONDS``); requests queued while it was held get a 503 (``gateway_stopping``,
Retry-After 5) at once, since no supervisor will release them. With
``gateway.orphan_timeout_seconds`` set, it does the same after that long without a word
from any supervisor on the control socket. systemd's gateway (``--owner external``) does
neither: its unit owns the socket and its life.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, disable_created_metrics

from agent_supervisor.errors import ListenError, PolicyError
from agent_supervisor.gateway.control import Refusal, control_app
from agent_supervisor.gateway.server import Gateway
from agent_supervisor.policy import Policy, load_policy_file
from agent_supervisor.serve import AppServer

__all__ = ["CONTROL_SOCKET", "HANDOVER_ENV", "STATE_FILE", "GatewayProcess", "gateway_argv",
           "inherited_sockets", "orphaned", "serve"]

logger = logging.getLogger(__name__)

CONTROL_SOCKET = "gateway.sock"
STATE_FILE = "gateway-state.json"
PID_FILE = "gateway.pid"
#: The fds a predecessor passed (comma-separated), for a hand-over.
HANDOVER_ENV = "SUPERVISOR_GATEWAY_FDS"
#: A successor must be serving within this long, or the hand-over is called off.
HANDOVER_TIMEOUT_SECONDS = 60.0
#: How often an owned gateway checks that its control socket is still its own (one
#: stat(2)) and that a supervisor spoke lately.
WATCH_SECONDS = 1.0


def orphaned(bound: tuple[int, int] | None, now_file: tuple[int, int] | None, *,
             silent_seconds: float, timeout_seconds: float | None) -> str | None:
    """Why an owned gateway should end itself, or None.

    ``bound``: (st_dev, st_ino) of its control socket's file when it began serving;
    ``now_file``: the same for whatever the path names now (None: nothing there);
    ``silent_seconds``: since the last request on the control socket (or the start);
    ``timeout_seconds``: ``gateway.orphan_timeout_seconds`` (None: no bound). Pure.
    """
    if now_file is None:
        return "its control socket's path is gone (the state directory was removed)"
    if bound is not None and now_file != bound:
        return "its control socket's path names another file now"
    if timeout_seconds is not None and silent_seconds >= timeout_seconds:
        return (f"no supervisor spoke on its control socket for {silent_seconds:.0f} s "
                f"(orphan_timeout_seconds {timeout_seconds:g})")
    return None


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def inherited_sockets(environ: dict[str, str] | None = None) -> dict[str, socket.socket]:
    """Listening sockets this process was given: ``{"gateway": tcp, "control": unix}``
    (either may be missing). Reads and removes ``LISTEN_PID``/``LISTEN_FDS`` (only when
    ``LISTEN_PID`` is this process, as sd_listen_fds(3) says) or ``HANDOVER_ENV``."""
    env = os.environ if environ is None else environ
    fds: list[int] = []
    if env.get("LISTEN_PID") == str(os.getpid()):
        fds = list(range(3, 3 + int(env.get("LISTEN_FDS", "0") or 0)))
    elif env.get(HANDOVER_ENV):
        fds = [int(f) for f in env[HANDOVER_ENV].split(",") if f]
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", HANDOVER_ENV):
        env.pop(key, None)
    out: dict[str, socket.socket] = {}
    for fd in fds:
        sock = socket.socket(fileno=fd)
        sock.set_inheritable(False)
        out["control" if sock.family == socket.AF_UNIX else "gateway"] = sock
    return out


def _control_socket(path: Path) -> socket.socket:
    """Bind ``path`` (0600). Raises OSError if another gateway answers there."""
    with contextlib.suppress(FileNotFoundError), socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError, TimeoutError):
            path.unlink(missing_ok=True)          # a dead gateway's socket file
        else:
            raise OSError(f"another gateway answers on {path}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(64)
    return sock


def sd_notify(message: str) -> None:
    """One sd_notify(3) datagram to ``$NOTIFY_SOCKET`` (no-op without it): READY=1 once
    serving, MAINPID= from a hand-over's successor (the unit's NotifyAccess=all)."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return
    address = "\0" + path[1:] if path.startswith("@") else path
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(message.encode(), address)


def _tcp_socket(host: str, port: int) -> socket.socket:
    """``host:port`` bound and listening (SO_REUSEADDR, as uvicorn binds). Raises
    ListenError (an OSError)."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as exc:
        raise ListenError("gateway", host, port, str(exc)) from exc
    sock.listen(LISTEN_BACKLOG)
    return sock


#: Connections the kernel queues before the gateway accepts them (nginx: 511); they
#: also wait here during a hand-over.
LISTEN_BACKLOG = 2048


def _short(sha256: str | None) -> str:
    return "none" if sha256 is None else sha256[:12]


class GatewayProcess:
    """One life of the gateway process (see the module docstring)."""

    def __init__(self, policy_path: Path, *, owner: str = "external",
                 base_dir: Path | None = None) -> None:
        self.policy_path = policy_path
        self.base_dir = base_dir
        """Where the policy's relative paths resolve (None: the file's directory)."""
        self.owner = owner
        self.policy: Policy = load_policy_file(policy_path, base_dir=base_dir)
        state = self.policy.state_directory
        self.state_path = state / STATE_FILE
        self.pid_path = state / PID_FILE
        self.control_path = state / CONTROL_SOCKET
        disable_created_metrics()  # type: ignore[no-untyped-call]  # as show/metrics.py
        self.registry = CollectorRegistry()
        saved = self._read_state()
        rung = saved.get("rung", self.policy.initial_rung)
        if not isinstance(rung, int) or not 0 <= rung < len(self.policy.modes):
            rung = self.policy.initial_rung
        self.gw = Gateway(self.policy, rung=rung, registry=self.registry)
        if saved.get("held") is False:
            self.gw.release(rung)
        if saved.get("shed"):
            self.gw.set_shed(True)
        self.gw.on_change = self._save_state
        self._stop = asyncio.Event()
        self._handover = False
        self._draining = False
        self._orphan: str | None = None
        """Why this owned gateway is ending itself (its state directory is gone)."""
        self._last_contact = time.monotonic()

    def _read_state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save_state(self) -> None:
        if self._draining or self._orphan:       # the successor owns the file, or none is
            return
        a = self.gw.admission
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rung": self.gw.rung, "held": a.held, "shed": a.shed,
                                   "pid": os.getpid(), "at": time.time()}))
        os.replace(tmp, self.state_path)

    def reload(self, rung: int, sha256: str | None = None) -> Refusal | None:
        """Read the policy file again and apply it; why it was refused, or None.

        ``sha256``: the digest of the bytes the supervisor validated (issue 30): a file
        whose bytes differ now (changed between the supervisor's read and this one) is
        refused, so the two never run different policies unannounced; the policy in
        force stays and the supervisor records the refusal as an incident. None: no
        check (a supervisor that sends none)."""
        try:
            policy = load_policy_file(self.policy_path, base_dir=self.base_dir)
        except PolicyError as exc:
            return Refusal(str(exc), None)
        read = policy.source_sha256
        if sha256 is not None and read != sha256:
            return Refusal(f"{self.policy_path} changed after the supervisor validated it "
                           f"(sha256 {_short(read)} read here, {_short(sha256)} validated)",
                           read)
        if not 0 <= rung < len(policy.modes):
            return Refusal(f"rung {rung} is not in the reloaded policy's ladder", read)
        refused = self.gw.reload_tls(policy)       # a bad certificate: the old one stays
        if refused is not None:
            return Refusal(refused, read)
        self.policy = policy
        self.gw.apply_policy(policy, rung)
        return None

    def request_stop(self, handover: bool = False) -> None:
        """Begin a graceful exit (safe from a signal handler)."""
        self._handover = self._handover or handover
        self._stop.set()

    async def run(self) -> int:
        """Serve until asked to stop; returns the exit status."""
        socks = inherited_sockets()
        spec = self.policy.gateway
        try:
            control = socks.get("control") or _control_socket(self.control_path)
            listener = socks.get("gateway") or _tcp_socket(spec.host, spec.port)
            await self.gw.start([listener])
        except OSError as exc:
            logger.error("gateway: %s", exc)
            return 2
        server = AppServer(control_app(self.gw, self.registry, owner=self.owner,
                                       reload=self.reload, stop=self.request_stop,
                                       contact=self._contact),
                           "unix", 0, name="gateway control")
        await server.start([control])
        self._save_state()
        self.pid_path.write_text(f"{os.getpid()}\n")
        sd_notify(f"MAINPID={os.getpid()}\nREADY=1")
        logger.info("gateway process %d serving (control %s, owner %s)", os.getpid(),
                    self.control_path, self.owner)
        watch = asyncio.get_running_loop().create_task(self._watch(
            _file_id(self.control_path)))
        while True:
            await self._stop.wait()
            if not self._handover or await self._hand_over(listener, control):
                break
            self._stop.clear()
            self._handover = False
        watch.cancel()
        if self._orphan:                         # no supervisor will ever release them
            refused = self.gw.admission.refuse_queued(
                f"the gateway is stopping: {self._orphan}; retry against the new one")
            logger.warning("gateway refused %d queued requests (503): %s", refused,
                           self._orphan)
        follow = asyncio.get_running_loop().create_task(self._follow_successor())
        # The control channel and the listener stop together: each uvicorn server takes
        # 0.2-0.3 s to see its stop and shut down, and one after the other doubled every
        # stop (measured: 0.51 s -> 0.28 s).
        await asyncio.gather(server.stop(), self._drain_and_stop())
        follow.cancel()
        logger.info("gateway process %d stopped", os.getpid())
        return 0

    async def _drain_and_stop(self) -> None:
        """Stop accepting, let connections end (``Gateway.drain``), then stop serving."""
        await self.gw.drain()
        await self.gw.stop()

    async def _hand_over(self, listener: socket.socket, control: socket.socket) -> bool:
        """Start a successor with our sockets; True once it serves (False: called off)."""
        socks = [listener, control]
        for s in socks:
            s.set_inheritable(True)
        env = {**os.environ, HANDOVER_ENV: ",".join(str(s.fileno()) for s in socks)}
        argv = gateway_argv(self.policy_path, self.owner, self.base_dir)
        log = self.policy.state_directory / "gateway.log"
        with open(log, "ab") as out:
            child = subprocess.Popen(argv, env=env, pass_fds=[s.fileno() for s in socks],
                                     stdout=out, stderr=out, cwd=os.getcwd())
        for s in socks:
            s.set_inheritable(False)
        self._draining = True                    # from now on the successor saves the state
        deadline = time.monotonic() + HANDOVER_TIMEOUT_SECONDS
        while time.monotonic() < deadline and child.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                if int(self.pid_path.read_text()) == child.pid:
                    logger.info("gateway handed its sockets to process %d", child.pid)
                    return True
            await asyncio.sleep(0.05)
        logger.error("gateway hand-over called off: the new process %s",
                     f"exited {child.returncode}" if child.poll() is not None
                     else "did not serve in time")
        if child.poll() is None:
            child.kill()
        self._draining = False
        self._save_state()
        return False

    def _contact(self) -> None:
        self._last_contact = time.monotonic()

    async def _watch(self, bound: tuple[int, int] | None) -> None:
        """An owned gateway ends itself (drains, exits 0) once ``orphaned`` says why."""
        if self.owner != "supervisor":
            return
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            why = orphaned(bound, _file_id(self.control_path),
                           silent_seconds=time.monotonic() - self._last_contact,
                           timeout_seconds=self.policy.gateway.orphan_timeout_seconds)
            if why is not None and not self._draining:
                logger.warning("gateway process %d stops: %s", os.getpid(), why)
                self._orphan = why
                self.request_stop()
                return

    async def _follow_successor(self) -> None:
        """While draining after a hand-over: held requests go when the successor's do."""
        while self._draining:
            saved = self._read_state()
            if saved.get("held") is False and self.gw.admission.held:
                self.gw.release(int(saved.get("rung", self.gw.rung)))
            await asyncio.sleep(0.25)


def gateway_argv(policy_path: Path, owner: str, base_dir: Path | None = None) -> list[str]:
    """The command of a gateway process this package starts: ``python -m agent_supervisor
    gateway --policy FILE --owner OWNER`` (``--base-dir DIR`` with ``base_dir``), which
    agent_supervisor/__main__.py runs without the other commands' imports
    (agent_supervisor/gateway/command.py)."""
    argv = [sys.executable, "-m", "agent_supervisor", "gateway", "--policy", str(policy_path),
            "--owner", owner]
    return argv if base_dir is None else [*argv, "--base-dir", str(base_dir)]


def serve(policy_path: Path, *, owner: str = "external", base_dir: Path | None = None) -> int:
    """Run the gateway process until SIGTERM; returns the exit status (2: bad policy or
    a listener that cannot be bound). ``base_dir``: where the policy's relative paths
    resolve (None: the file's directory)."""
    import uvloop

    os.umask(0o077)

    async def main() -> int:
        try:
            proc = GatewayProcess(policy_path, owner=owner, base_dir=base_dir)
        except PolicyError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, proc.request_stop, False)
        loop.add_signal_handler(signal.SIGINT, proc.request_stop, False)
        loop.add_signal_handler(signal.SIGHUP, proc.request_stop, True)
        return await proc.run()

    return uvloop.run(main())

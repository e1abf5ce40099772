"""``GatewayLink``: the supervisor's side of its gateway process.

The gateway runs as its own process (agent_supervisor/gateway/process.py), so agents'
connections outlive the supervisor. At start the link attaches to the gateway already
answering on ``<state>/gateway.sock`` (one an earlier life started, or systemd's
socket-activated unit: connecting to its control socket starts it), or starts one
(``supervisor gateway --owner supervisor``, in a session of its own so that a SIGKILL of
the supervisor's group leaves it). Then it is, for the executor, the ``GatewayControl``
(hold, release, shed: sent in order over the control socket) and, for the sensors, the
``GatewayLoadSource`` (the load of the last poll, every ``POLL_SECONDS``). Every
resumption or whole re-send the gateway reports becomes an incident of kind
``stream_resumed`` through the Recorder (the one incident sink). The gateway's counters
are re-exported on the supervisor's /metrics (``refresh`` before each scrape). At each
poll the ladder's readiness verdict (``readiness_verdict``: a reboot required, a hang
suspected) is sent when it changed, for the gateway's ``/ready`` (issue 31).

A gateway that dies is started again with its saved state (rung, held, shed).

The service always runs its gateway this way, as production does (issue 30: one gateway
face, ``GatewayFace``). A policy that came from no file (built in memory: tests, an
embedding program) is written for the process to read, as JSON of the validated model,
to ``<state>/gateway-policy.json`` (0600, replaced whole), with ``--base-dir`` so that its
relative paths resolve where the policy's own do; a reload writes it again and sends that
file's digest. A gateway started from such a file is also stopped (SIGTERM) when the
supervisor's interpreter exits, clean stop or not: no file outside the service names it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from agent_supervisor.act.capabilities import drop_ambient_capabilities
from agent_supervisor.act.incident import Incident
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.errors import ListenError
from agent_supervisor.gateway.process import CONTROL_SOCKET, gateway_argv
from agent_supervisor.policy import Policy, PolicyHolder
from agent_supervisor.runtime.gateway_face import GatewayFace
from agent_supervisor.runtime.gateway_record import failover_incident
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder
from agent_supervisor.sense.gateway_load import GatewayLoad

__all__ = ["POLL_SECONDS", "WRITTEN_POLICY", "GatewayLink", "make_gateway",
           "readiness_verdict"]

logger = logging.getLogger(__name__)

#: How often the link reads the gateway's load and new resumptions (a Unix-socket GET,
#: well under a millisecond of the gateway's time).
POLL_SECONDS = 0.5
#: How often a new gateway process is asked whether it serves (a failed connect to a Unix
#: socket: microseconds; it serves about 0.7 s after its start on an idle 2-core box).
SPAWN_POLL_SECONDS = 0.02
#: A new gateway process must answer within this long (imports take ~1 s; on a box
#: whose CPU the engine saturates, several).
START_TIMEOUT_SECONDS = 60.0
#: The supervisor's own systemd variables, never a gateway's it starts.
_NOT_INHERITED = frozenset({"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_PID",
                            "LISTEN_FDS", "LISTEN_FDNAMES"})
#: The policy a link writes for its gateway process when the service's came from no file.
WRITTEN_POLICY = "gateway-policy.json"
#: Gateway processes started from a written policy, stopped at the interpreter's exit.
_EPHEMERAL: set[subprocess.Popen[bytes]] = set()


def _stop_ephemeral() -> None:
    for proc in _EPHEMERAL:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.terminate()


atexit.register(_stop_ephemeral)


class GatewayLink:
    """The gateway process of ``holder``'s policy, reached at ``<state>/gateway.sock``;
    ``policy_path``: the file the gateway process reads (it is started with it); None: the
    policy came from no file, and the link writes ``<state>/gateway-policy.json`` for it
    (module docstring). It has the service's ``GatewayFace``."""

    def __init__(self, holder: PolicyHolder, policy_path: Path | None,
                 registry: CollectorRegistry, recorder: Recorder | None = None, *,
                 verdict: Callable[[], str | None] | None = None) -> None:
        self._holder = holder
        self._verdict_of = verdict
        """The supervisor's readiness verdict now, sent at each poll when it changed."""
        state = holder.current.state_directory
        self._writes_policy = policy_path is None
        """Whether the file the gateway reads is one this link writes."""
        self.policy_path = state / WRITTEN_POLICY if policy_path is None else policy_path
        self._base_dir = holder.current.base_dir if policy_path is None else None
        self.recorder = recorder
        self.socket_path = state / CONTROL_SOCKET
        self.client = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(self.socket_path)),
            base_url="http://gateway", timeout=httpx.Timeout(10.0))
        self.proc: subprocess.Popen[bytes] | None = None
        self.owner: str | None = None
        self.pid: int | None = None
        self.found_serving = False
        """Whether the gateway found at start was already admitting (an earlier life's)."""
        self._load: GatewayLoad | None = None
        self._summary: dict[str, object] = {}
        self._metrics = ""
        self._seq = 0
        self._rung = 0
        self._verdict: object = _UNSENT
        """The verdict last sent (``_UNSENT``: none yet, or the gateway lost it)."""
        self._advising_of: Callable[[], bool] | None = None
        self._advise: object = _UNSENT
        """Whether the service advises, as last sent (issue 31)."""
        self._failover_seq = 0
        self._queue: asyncio.Queue[tuple[str, dict[str, Any], asyncio.Future[Any]]] = \
            asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._sender: asyncio.Task[None] | None = None
        """The task that sends the queued commands in order (``_send_in_order``)."""
        registry.register(_Relay(self))

    # -- life ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Attach to the running gateway or start one. Raises ListenError when a new
        one cannot listen (it exited 2)."""
        if self._writes_policy:
            self._write(self._holder.current)
        state = await self._state()
        if state is None:
            state = await self._spawn()
        else:
            self._seq = max((r["seq"] for r in state["resumptions"]), default=0)
            self._failover_seq = max((f["seq"] for f in state.get("failovers", [])),
                                     default=0)
            logger.info("gateway process %s attached (owner %s, mode %s, %s)", state["pid"],
                        state["owner"], state["mode"], "held" if state["held"] else
                        "admitting")
        self.found_serving = not state["held"]
        self._take(state)
        loop = asyncio.get_running_loop()
        self._sender = loop.create_task(self._send_in_order())
        self._tasks = [loop.create_task(self._poll()), self._sender]

    async def _spawn(self) -> dict[str, Any]:
        policy = self._holder.current
        log = policy.state_directory / "gateway.log"
        argv = gateway_argv(self.policy_path, "supervisor", self._base_dir)
        # Not the supervisor's systemd channels: a gateway that said READY=1 or MAINPID=
        # on the supervisor's NOTIFY_SOCKET would take over its unit's main pid.
        env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=os.getcwd(), env=env,
                                         preexec_fn=drop_ambient_capabilities)
        if self._writes_policy:
            _EPHEMERAL.add(self.proc)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ListenError("gateway", policy.gateway.host, policy.gateway.port,
                                  f"its process exited {self.proc.returncode}; see {log}")
            state = await self._state()
            if state is not None:
                logger.info("gateway process %d started (log %s)", self.proc.pid, log)
                return state
            await asyncio.sleep(SPAWN_POLL_SECONDS)
        self.proc.kill()
        raise ListenError("gateway", policy.gateway.host, policy.gateway.port,
                          f"its process did not answer in {START_TIMEOUT_SECONDS:.0f} s")

    async def stop(self, *, leave_running: bool = False) -> None:
        """Stop talking to it; a gateway this supervisor's lives started is stopped too
        (it drains first), unless ``leave_running`` (an upgrade: the next life attaches)."""
        await self._flush()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.owner == "supervisor" and not leave_running:
            with contextlib.suppress(httpx.HTTPError):
                await self.client.post("/control/stop", json={})
            await self._wait_gone()
        await self.client.aclose()

    async def _wait_gone(self) -> None:
        limit = self._holder.current.gateway.drain_timeout_seconds + 10
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self._gone():
                return
            await asyncio.sleep(0.05)
        logger.warning("gateway process %s still running %.0f s after its stop", self.pid,
                       limit)

    # -- GatewayControl ---------------------------------------------------------------

    async def hold(self, reason: str, *, drain: bool = True) -> None:
        """Stop admitting (and drain): returns when the gateway has done it."""
        await self._command("/control/hold", {"reason": reason, "drain": drain})

    def release(self, rung: int) -> None:
        """Admit in ``rung`` (sent after any command before it)."""
        self._enqueue("/control/release", {"rung": rung})

    def set_shed(self, shed: bool) -> None:
        """Lower or restore the limits."""
        self._enqueue("/control/shed", {"shed": shed})

    def apply_policy(self, policy: Policy, rung: int) -> None:
        """A reloaded policy: the gateway reads the file again and takes it only if its
        bytes are the ones validated here (``policy.source_sha256``, or the digest of the
        file written for it: ``_write``); a refusal becomes a ``gateway_policy_refused``
        incident (``_refused``)."""
        digest = self._write(policy) if self._writes_policy else policy.source_sha256
        self._enqueue("/control/policy", {"rung": rung, "sha256": digest})

    def _write(self, policy: Policy) -> str:
        """``policy`` as the file the gateway process reads (JSON of the validated model,
        which the YAML loader reads as is; mode 0600: it may hold a database URL);
        returns the sha256 (hex) of its bytes. Raises OSError when it cannot be written."""
        raw = (json.dumps(policy.model_dump(mode="json"), indent=1) + "\n").encode()
        self.policy_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.policy_path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        os.replace(tmp, self.policy_path)
        return hashlib.sha256(raw).hexdigest()

    def follow(self, verdict: Callable[[], str | None],
               advising: Callable[[], bool]) -> None:
        """Send ``verdict()`` and ``advising()`` at each poll when they changed
        (agent_supervisor/runtime/gateway_wiring.py)."""
        self._verdict_of, self._advising_of = verdict, advising

    def set_verdict(self, reason: str | None) -> None:
        """The readiness verdict (``readiness_verdict``), sent when it changed."""
        if reason != self._verdict:
            self._verdict = reason
            self._enqueue("/control/verdict", {"reason": reason})

    # -- GatewayLoadSource and status --------------------------------------------------

    def gateway_load(self) -> GatewayLoad | None:
        """The load at the last poll (None: the gateway has not answered lately)."""
        return self._load

    def summary(self) -> dict[str, object]:
        """Held or not and the load, at the last poll."""
        return dict(self._summary)

    async def refresh(self) -> None:
        """Fetch the gateway's counters now (before a /metrics scrape)."""
        with contextlib.suppress(httpx.HTTPError):
            resp = await self.client.get("/control/metrics", timeout=2.0)
            if resp.status_code == 200:
                self._metrics = resp.text

    # -- inside -------------------------------------------------------------------------

    async def _state(self) -> dict[str, Any] | None:
        try:
            resp = await self.client.get("/control/state", params={
                "since": self._seq, "failover_since": self._failover_seq}, timeout=5.0)
        except httpx.HTTPError:
            return None
        return resp.json() if resp.status_code == 200 else None

    def _take(self, state: dict[str, Any]) -> None:
        self.owner, self.pid, self._rung = state["owner"], state["pid"], state["rung"]
        self._load = GatewayLoad(**state["load"])
        self._summary = state["summary"]
        if state.get("verdict") != self._verdict and self._queue.empty():
            self._verdict = _UNSENT        # a gateway that lost it (restarted): send again
        for entry in state["resumptions"]:
            self._seq = max(self._seq, entry["seq"])
            self._record(entry)
        if state.get("advise") != self._advise and self._queue.empty():
            self._advise = _UNSENT          # a gateway that lost it (restarted): send again
        for entry in state.get("failovers", []):
            self._failover_seq = max(self._failover_seq, entry["seq"])
            if self.recorder is not None:
                self.recorder.incident(failover_incident(entry, self._mode()))

    def _record(self, entry: dict[str, Any]) -> None:
        if self.recorder is None:
            return
        at = datetime.fromtimestamp(entry["at"], UTC)
        how = entry["continuation"]
        what = "re-sent whole" if how == "whole" else f"{entry['outcome']} ({how}-level, " \
            f"after {entry.get('tokens_before', 0)} tokens)"
        self.recorder.incident(Incident(
            kind="stream_resumed", severity="info" if entry["outcome"] != "failed"
            else "warning", started_at=at, action="resume", mode=self._mode(),
            explanation=f"{entry['path']}: a request cut by the engine was {what}, held "
            f"{entry.get('waited_seconds', 0):.1f} s", outcome=entry["outcome"],
            findings=[entry]))

    def _refused(self, body: dict[str, Any], resp: httpx.Response) -> None:
        """The gateway kept its policy while this supervisor took the new one: an
        incident (warning, alerted: ``show/alerts.ALERT_KINDS``) with the gateway's
        reason and both digests, never the file's content."""
        try:
            detail = resp.json().get("detail")
        except ValueError:
            detail = None
        if not isinstance(detail, dict):     # a gateway without the digest check (422)
            detail = {"reason": f"HTTP {resp.status_code}: {resp.text[:300]}"}
        reason = str(detail.get("reason"))
        evidence = {"reason": reason, "sha256_validated": body.get("sha256"),
                    "sha256_read": detail.get("sha256_read"), "rung": body.get("rung"),
                    "status": resp.status_code}
        logger.error("gateway process kept its policy, the supervisor runs the new one: %s",
                     reason)
        if self.recorder is None:
            return
        self.recorder.incident(Incident(
            kind="gateway_policy_refused", severity="warning", started_at=datetime.now(UTC),
            action="keep_policy", mode=self._mode(), rung=body.get("rung"),
            explanation=f"the gateway process refused the reloaded policy and keeps its "
            f"previous one; the supervisor runs the new one: {reason}",
            outcome="the gateway runs its previous policy", findings=[evidence]))

    def _mode(self) -> str:
        modes = self._holder.current.modes
        return modes[min(self._rung, len(modes) - 1)].name

    def _gone(self) -> bool:
        if self.proc is not None and self.proc.pid == self.pid:
            return self.proc.poll() is not None
        return not _alive(self.pid)

    async def _poll(self) -> None:
        missed = 0
        while True:
            await asyncio.sleep(POLL_SECONDS)
            state = await self._state()
            if state is not None:
                missed = 0
                self._take(state)
                if self._verdict_of is not None:
                    self.set_verdict(self._verdict_of())
                if self._advising_of is not None and self._advising_of() != self._advise:
                    self._advise = self._advising_of()
                    self._enqueue("/control/supervision",
                                  {"mode": "advise" if self._advise else "act"})
                continue
            missed += 1
            self._load = None
            if missed * POLL_SECONDS >= 3 and self._gone():
                logger.error("gateway process %s is gone: starting a new one", self.pid)
                with contextlib.suppress(ListenError):
                    self._take(await self._spawn())
                missed = 0

    def _enqueue(self, path: str, body: dict[str, Any]) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((path, body, future))
        return future

    async def _command(self, path: str, body: dict[str, Any]) -> Any:
        """Send in order and wait for the answer's status; None when the sender is not
        running (before ``start``, or cancelled: a service torn down by cancellation must
        not wait forever for a command nobody sends)."""
        future = self._enqueue(path, body)
        sender = self._sender
        if sender is None or sender.done():
            logger.warning("gateway control %s not sent: the link is not running", path)
            return None
        await asyncio.wait({future, sender}, return_when=asyncio.FIRST_COMPLETED)
        return future.result() if future.done() else None

    async def _flush(self) -> None:
        """Wait (briefly) until the commands queued so far are sent."""
        if not self._tasks or self._queue.empty():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._command("/control/state", {}), 10.0)

    async def _send_in_order(self) -> None:
        """Send each command once the gateway answers (retrying through its restarts)."""
        while True:
            path, body, future = await self._queue.get()
            timeout = self._holder.current.gateway.drain_timeout_seconds + 30
            while True:
                try:
                    resp = await (self.client.get(path) if path == "/control/state" else
                                  self.client.post(path, json=body, timeout=timeout))
                except httpx.HTTPError as exc:
                    logger.warning("gateway control %s: %s; retrying", path, exc)
                    await asyncio.sleep(0.5)
                    continue
                if resp.status_code >= 400:
                    logger.error("gateway refused %s: %s", path, resp.text)
                    if path == "/control/policy":
                        self._refused(body, resp)
                if not future.done():
                    future.set_result(resp.status_code)
                break


#: No verdict sent to this gateway yet.
_UNSENT = object()


def readiness_verdict(ladder: LadderState) -> str | None:
    """Why the gateway's readiness probes should say "not ready" beyond its own hold
    (agent_supervisor/gateway/readiness.py): the ladder holds for a reboot, or a hang is
    suspected (the shed that waits for the canary's answer); None: nothing against it."""
    if ladder.reboot_required is not None:
        return f"reboot required ({ladder.reboot_required})"
    if ladder.shed and ladder.shed_kind == "engine_hang_suspected":
        return "engine hang suspected (no progress; a canary is on its way)"
    return None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Relay:
    """The gateway process's counters on the supervisor's registry (the text of the
    last ``refresh``)."""

    def __init__(self, link: GatewayLink) -> None:
        self.link = link

    def collect(self) -> Iterator[Metric]:
        """Each family of the last scrape of the gateway."""
        if self.link._metrics:
            yield from text_string_to_metric_families(self.link._metrics)


def make_gateway(holder: PolicyHolder, registry: CollectorRegistry, recorder: Recorder | None,
                 ladder: Ladder | None = None) -> GatewayFace | None:
    """The link to the gateway's own process (agents' connections outlive this one), from
    the policy's file or, with none, from the one the link writes; None when
    ``gateway.enabled`` is false. With ``ladder``, its readiness probes follow
    ``readiness_verdict`` of the ladder's state."""
    if not holder.current.gateway.enabled:
        return None
    verdict = None if ladder is None else (lambda: readiness_verdict(ladder.state))
    return GatewayLink(holder, holder.path, registry, recorder, verdict=verdict)

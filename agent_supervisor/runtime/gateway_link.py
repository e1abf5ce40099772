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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
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
from agent_supervisor.gateway.process import CONTROL_SOCKET
from agent_supervisor.gateway.server import Gateway
from agent_supervisor.policy import Policy
from agent_supervisor.policy_holder import PolicyHolder
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder
from agent_supervisor.sense.gateway_load import GatewayLoad

__all__ = ["POLL_SECONDS", "GatewayLink", "make_gateway", "readiness_verdict"]

logger = logging.getLogger(__name__)

#: How often the link reads the gateway's load and new resumptions (a Unix-socket GET,
#: well under a millisecond of the gateway's time).
POLL_SECONDS = 0.5
#: A new gateway process must answer within this long (imports take ~1 s; on a box
#: whose CPU the engine saturates, several).
START_TIMEOUT_SECONDS = 60.0
#: The supervisor's own systemd variables, never a gateway's it starts.
_NOT_INHERITED = frozenset({"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_PID",
                            "LISTEN_FDS", "LISTEN_FDNAMES"})


class GatewayLink:
    """The gateway process of ``holder``'s policy, reached at ``<state>/gateway.sock``;
    ``policy_path``: the file the gateway process reads (it is started with it)."""

    def __init__(self, holder: PolicyHolder, policy_path: Path, registry: CollectorRegistry,
                 recorder: Recorder | None = None, *,
                 verdict: Callable[[], str | None] | None = None) -> None:
        self._holder = holder
        self._verdict_of = verdict
        """The supervisor's readiness verdict now, sent at each poll when it changed."""
        self.policy_path = policy_path
        self.recorder = recorder
        state = holder.current.state_directory
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
        self._queue: asyncio.Queue[tuple[str, dict[str, Any], asyncio.Future[Any]]] = \
            asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        registry.register(_Relay(self))

    # -- life ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Attach to the running gateway or start one. Raises ListenError when a new
        one cannot listen (it exited 2)."""
        state = await self._state()
        if state is None:
            state = await self._spawn()
        else:
            self._seq = max((r["seq"] for r in state["resumptions"]), default=0)
            logger.info("gateway process %s attached (owner %s, mode %s, %s)", state["pid"],
                        state["owner"], state["mode"], "held" if state["held"] else
                        "admitting")
        self.found_serving = not state["held"]
        self._take(state)
        self._tasks = [asyncio.get_running_loop().create_task(t) for t in
                       (self._poll(), self._send_in_order())]

    async def _spawn(self) -> dict[str, Any]:
        policy = self._holder.current
        log = policy.state_directory / "gateway.log"
        argv = [sys.executable, "-m", "agent_supervisor", "gateway", "--policy",
                str(self.policy_path), "--owner", "supervisor"]
        # Not the supervisor's systemd channels: a gateway that said READY=1 or MAINPID=
        # on the supervisor's NOTIFY_SOCKET would take over its unit's main pid.
        env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=os.getcwd(), env=env,
                                         preexec_fn=drop_ambient_capabilities)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ListenError("gateway", policy.gateway.host, policy.gateway.port,
                                  f"its process exited {self.proc.returncode}; see {log}")
            state = await self._state()
            if state is not None:
                logger.info("gateway process %d started (log %s)", self.proc.pid, log)
                return state
            await asyncio.sleep(0.1)
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
        """A reloaded policy: the gateway reads the file again."""
        self._enqueue("/control/policy", {"rung": rung})

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
            resp = await self.client.get("/control/state", params={"since": self._seq},
                                         timeout=5.0)
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
        return await self._enqueue(path, body)

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


def make_gateway(holder: PolicyHolder, registry: CollectorRegistry, recorder: Recorder,
                 ladder: Ladder | None = None) -> Gateway | GatewayLink | None:
    """The gateway's own process when there is a policy file for it to read (agents'
    connections then outlive this process), else one inside this process (tests that
    build a policy in memory); None when ``gateway.enabled`` is false. With ``ladder``,
    its readiness probes follow ``readiness_verdict`` of the ladder's state."""
    policy = holder.current
    if not policy.gateway.enabled:
        return None
    verdict = None if ladder is None else (lambda: readiness_verdict(ladder.state))
    if holder.path is None:
        gw = Gateway(policy, rung=policy.initial_rung, registry=registry)
        gw.verdict_of = verdict
        return gw
    return GatewayLink(holder, holder.path, registry, recorder, verdict=verdict)

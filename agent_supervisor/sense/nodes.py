"""``NodePoller``: the head's view of every worker node, from the nodes' agents.

A background task asks each agent for its latest sample every ``sampling.tick_seconds``
(``GET /v1/node/sample``, bearer token, ``distributed.poll_timeout_seconds``), all nodes at
once, and keeps the last answer of each with the head-monotonic time it arrived. The tick
never waits on a node: ``snapshot(now_s)`` hands the last answers with their age, so a
frozen worker (an agent that accepts the connection and never answers) shows as a growing
age, never as a late tick. The node's clock is compared with the head's at the middle of
the request (``clock_skew_seconds``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable

import httpx

from agent_supervisor.policy import Policy
from agent_supervisor.policy_holder import PolicyHolder
from agent_supervisor.policy_nodes import NodeSpec, agent_token
from agent_supervisor.telemetry.node_sample import NodeSample

__all__ = ["NodePoller", "agent_url"]

logger = logging.getLogger(__name__)


def agent_url(node: NodeSpec) -> str:
    """``http://address:agent_port`` (IPv6 addresses bracketed)."""
    host = f"[{node.address}]" if ":" in node.address else node.address
    return f"http://{host}:{node.agent_port}"


class NodePoller:
    """Polls the worker nodes' agents. ``await start()``, ``snapshot(now_s)`` each tick,
    ``await close()``. ``clock`` is the head's monotonic clock (tests pass their own)."""

    def __init__(self, policy: Policy | PolicyHolder, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = PolicyHolder.of(policy)
        self._clock = clock
        self._last: dict[str, tuple[float, NodeSample]] = {}
        self._errors: dict[str, str] = {}
        self._http: httpx.AsyncClient | None = None
        self._task: asyncio.Task[None] | None = None
        self.token: str | None = None

    @property
    def policy(self) -> Policy:
        """The policy in force (read on use)."""
        return self._policy.current

    @property
    def workers(self) -> list[NodeSpec]:
        """The worker nodes (every node but the head)."""
        return list(self.policy.engine.nodes[1:])

    async def start(self) -> None:
        """Read the token, open the client, poll once, then keep polling in the background."""
        self.token = agent_token(self.policy)
        self._http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {self.token}"} if self.token else {})
        await self.poll()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            began = self._clock()
            await self.poll()
            period = self.policy.sampling.tick_seconds
            await asyncio.sleep(max(0.05, period - (self._clock() - began)))

    async def poll(self) -> None:
        """Ask every worker's agent once, concurrently."""
        await asyncio.gather(*(self._poll_one(n) for n in self.workers))

    async def _poll_one(self, node: NodeSpec) -> None:
        assert self._http is not None
        timeout = self.policy.engine.distributed.poll_timeout_seconds
        sent_wall = time.time()
        try:
            res = await self._http.get(f"{agent_url(node)}/v1/node/sample", timeout=timeout)
        except httpx.HTTPError as exc:
            self._note(node, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            return
        got_wall = time.time()
        if res.status_code != 200:
            self._note(node, f"HTTP {res.status_code} from the agent")
            return
        try:
            body = res.json()
            sample = NodeSample.from_dict(body["sample"])
            skew = float(body["agent_wall_s"]) - (sent_wall + got_wall) / 2
        except (ValueError, KeyError, TypeError) as exc:
            self._note(node, f"bad answer from the agent: {exc}")
            return
        self._errors.pop(node.name, None)
        self._last[node.name] = (self._clock(), dataclasses.replace(
            sample, clock_skew_seconds=round(skew, 3)))

    def _note(self, node: NodeSpec, error: str) -> None:
        if self._errors.get(node.name) != error:
            logger.warning("node %s: agent at %s: %s", node.name, agent_url(node), error)
        self._errors[node.name] = error

    def snapshot(self, now_s: float) -> tuple[NodeSample, ...]:
        """Every worker node's last answer with its age at ``now_s`` (head monotonic);
        a node never heard from has only its name, address and error."""
        out = []
        for node in self.workers:
            error = self._errors.get(node.name)
            if node.name not in self._last:
                out.append(NodeSample(name=node.name, address=node.address, error=error))
                continue
            at, sample = self._last[node.name]
            out.append(dataclasses.replace(sample, age_seconds=round(max(0.0, now_s - at), 3),
                                           error=error))
        return tuple(out)

    async def close(self) -> None:
        """Stop polling and close the client."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._http is not None:
            await self._http.aclose()

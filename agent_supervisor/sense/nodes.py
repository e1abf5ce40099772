"""``NodePoller``: the head's view of every worker node, from the nodes' agents.

A background task asks each agent for its latest sample every ``sampling.tick_seconds``
(``GET /v1/node/sample``, bearer token, ``distributed.poll_timeout_seconds``), all nodes at
once, and keeps the last answer of each with the head-monotonic time it arrived. The tick
never waits on a node: ``snapshot(now_s)`` hands the last answers with their age, so a
frozen worker (an agent that accepts the connection and never answers) shows as a growing
age, never as a late tick. The node's clock is compared with the head's at the middle of
the request (``clock_skew_seconds``).

No answer can end polling or make a tick raise (issue 34): each answer is read up to
``MAX_ANSWER_BYTES`` within ``poll_timeout_seconds`` in total (a trickle does not extend
it) and validated by ``parse_node_answer``; a refused answer, ``{"sample": null}`` (an agent
before its first sample) included, is logged and kept as that node's error for the tick,
its last good values ageing as usual. The loop itself survives any exception of a poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable

import httpx

from agent_supervisor.policy import PolicyHolder
from agent_supervisor.policy.model import Policy, agent_token
from agent_supervisor.policy.nodes import NodeSpec
from agent_supervisor.sense.node_answer import MAX_ANSWER_BYTES, NodeAnswerError, parse_node_answer
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

    def __init__(
        self, policy: Policy | PolicyHolder, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
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
            headers={"Authorization": f"Bearer {self.token}"} if self.token else {}
        )
        await self.poll()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            began = self._clock()
            try:
                await self.poll()
            except Exception:  # a poll must never end polling
                logger.exception("node poller: a poll failed; polling goes on")
            period = self.policy.sampling.tick_seconds
            await asyncio.sleep(max(0.05, period - (self._clock() - began)))

    async def poll(self) -> None:
        """Ask every worker's agent once, concurrently."""
        await asyncio.gather(*(self._poll_one(n) for n in self.workers))

    async def _poll_one(self, node: NodeSpec) -> None:
        try:
            await self._ask(node)
        except Exception as exc:  # one node's answer never ends the poll
            logger.debug("node %s: unexpected error", node.name, exc_info=True)
            self._note(node, f"unexpected {type(exc).__name__} reading the agent's answer")

    async def _ask(self, node: NodeSpec) -> None:
        timeout = self.policy.engine.distributed.poll_timeout_seconds
        sent_wall = time.time()
        try:
            async with asyncio.timeout(timeout):
                status, body = await self._fetch(node, timeout)
        except TimeoutError:
            self._note(node, f"no whole answer within {timeout:g} s")
            return
        except httpx.HTTPError as exc:
            self._note(node, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            return
        got_wall = time.time()
        if status != 200:
            self._note(node, f"HTTP {status} from the agent")
            return
        try:
            if body is None:
                raise NodeAnswerError(f"answer over {MAX_ANSWER_BYTES} bytes")
            sample, agent_wall = parse_node_answer(body)
        except NodeAnswerError as exc:
            self._note(node, f"bad answer from the agent: {exc}")
            return
        if sample is None:
            self._note(node, "the agent has no sample yet")
            return
        skew = agent_wall - (sent_wall + got_wall) / 2
        self._errors.pop(node.name, None)
        self._last[node.name] = (
            self._clock(),
            dataclasses.replace(
                sample, clock_skew_seconds=round(skew, 3) if math.isfinite(skew) else None
            ),
        )

    async def _fetch(self, node: NodeSpec, timeout: float) -> tuple[int, bytes | None]:
        """(status, body) of one request; body None when it grew past MAX_ANSWER_BYTES."""
        assert self._http is not None
        url = f"{agent_url(node)}/v1/node/sample"
        async with self._http.stream("GET", url, timeout=timeout) as res:
            if res.status_code != 200:
                return res.status_code, b""
            chunks, size = [], 0
            async for chunk in res.aiter_bytes():
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    return res.status_code, None
                chunks.append(chunk)
            return res.status_code, b"".join(chunks)

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
            out.append(
                dataclasses.replace(sample, age_seconds=round(max(0.0, now_s - at), 3), error=error)
            )
        return tuple(out)

    async def close(self) -> None:
        """Stop polling and close the client."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._http is not None:
            await self._http.aclose()

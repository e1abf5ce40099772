"""``NodesEngine``: one engine across boxes, behind the executor's ``EngineControl``.

The head's launcher keeps owning the head's rank (the API server); the worker ranks are
run by the nodes' agents on the head's orders (``agent/app.py``). Every kill, stop or
restart reaches every rank:

- ``kill`` / ``stop``: the head's rank (SIGKILL, or SIGTERM and the drain) and every
  worker's rank at once; the agents answer with what is left of each rank and the node's
  memory. Whether every rank is gone and the memory back on every node is checked again
  before the next start by the preflight (guard ``nodes``), from the nodes' samples.
- ``start``: kill what is left of the workers' ranks, start every worker's rank first
  (each for the run id the head's rank will get), then the head's rank. A worker that
  cannot be started holds the start: the workers already started are stopped, the head's
  rank is not started, and ``PreflightFailed`` (an ``EngineStartError``) names the node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from agent_supervisor.act.engine_run import EngineRun, new_run_id
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.act.node_argv import head_start_args
from agent_supervisor.act.stack_dump import StackDump
from agent_supervisor.errors import EngineStartError
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.policy.model import Policy, agent_token
from agent_supervisor.policy.nodes import NodeSpec
from agent_supervisor.sense.nodes import agent_url
from agent_supervisor.states import CrashReason, EngineState

__all__ = ["NodesEngine", "PreflightFailed"]

logger = logging.getLogger(__name__)


class PreflightFailed(EngineStartError):
    """A worker node's rank could not be started: the whole start is held. ``.node``."""

    def __init__(self, message: str, *, node: str) -> None:
        super().__init__(message)
        self.node = node


class NodesEngine:
    """The launcher of the head's rank plus the agents of the worker nodes.

    ``on_held(node, message)`` is called when a start is held by a worker (the service
    records it as an incident naming the node)."""

    def __init__(self, policy: Policy | PolicyHolder, launcher: EngineLauncher, *,
                 on_held: Callable[[str, str], None] | None = None) -> None:
        self._policy = PolicyHolder.of(policy)
        self.launcher = launcher
        self._on_held = on_held
        self._http: httpx.AsyncClient | None = None
        self.order: list[tuple[str, float]] = []
        """(rank name, monotonic time) of every rank start, oldest first (bounded)."""

    @property
    def policy(self) -> Policy:
        """The policy in force."""
        return self._policy.current

    @property
    def state(self) -> EngineState:
        """The head's rank's state (the engine's API server)."""
        return self.launcher.state

    @property
    def run(self) -> EngineRun | None:
        """The head's current or last run."""
        return self.launcher.run

    @property
    def base_url(self) -> str:
        """The head's HTTP server."""
        return self.launcher.base_url

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            token = agent_token(self.policy)
            self._http = httpx.AsyncClient(
                headers={"Authorization": f"Bearer {token}"} if token else {})
        return self._http

    async def _order(self, node: NodeSpec, path: str, body: dict[str, Any],
                     timeout: float) -> dict[str, Any]:
        """POST an order to ``node``'s agent. Raises PreflightFailed naming the node."""
        try:
            res = await self._client().post(f"{agent_url(node)}{path}", json=body,
                                            timeout=timeout)
        except httpx.HTTPError as exc:
            raise PreflightFailed(f"node {node.name}: agent at {agent_url(node)} did not "
                                  f"answer {path} ({type(exc).__name__})",
                                  node=node.name) from exc
        if res.status_code != 200:
            detail = res.text[:300]
            raise PreflightFailed(f"node {node.name}: {path} refused with HTTP "
                                  f"{res.status_code}: {detail}", node=node.name)
        return dict(res.json())

    async def _stop_workers(self, *, reason: str, kill: bool) -> dict[str, Any]:
        eng = self.policy.engine
        timeout = eng.kill_timeout_seconds + 5 + (
            0 if kill else eng.shutdown_timeout_seconds + eng.stop_grace_seconds)
        workers = self.policy.engine.nodes[1:]
        results = await asyncio.gather(*(self._order(
            n, "/v1/node/rank/stop", {"reason": reason, "kill": kill}, timeout)
            for n in workers), return_exceptions=True)
        out: dict[str, Any] = {}
        for node, result in zip(workers, results, strict=True):
            if isinstance(result, BaseException):
                logger.warning("%s", result)
                out[node.name] = {"error": str(result)}
            else:
                out[node.name] = result
                if result.get("survivors"):
                    logger.warning("node %s: rank pids %s survived", node.name,
                                   result["survivors"])
        return out

    async def kill(self, *, reason: str, crash: CrashReason | None = None,
                   emergency: str | None = None) -> None:
        """SIGKILL every rank now: the head's and every worker's, at once."""
        logger.info("killing every rank (%s)", reason)
        await asyncio.gather(self.launcher.kill(reason=reason, crash=crash,
                                                emergency=emergency),
                             self._stop_workers(reason=reason, kill=True))

    async def dump_stacks(self, reason: str) -> StackDump | None:
        """The head's rank's stacks (its API server and EngineCore, within
        ``lifecycle.stack_dump_seconds``), read before a kill; the workers' ranks run on
        other boxes, where no tool of this one can read them. None without a run."""
        return await self.launcher.dump_stacks(reason)

    async def stop(self, *, reason: str) -> None:
        """Stop every rank gracefully (the head drains; the workers get SIGTERM)."""
        logger.info("stopping every rank (%s)", reason)
        await asyncio.gather(self.launcher.stop(reason=reason),
                             self._stop_workers(reason=reason, kill=False))

    async def start(self, *, rung: int,
                    start_args: tuple[tuple[str, object], ...] = ()) -> EngineRun:
        """1. SIGKILL what is left of every worker's rank; 2. start every worker's rank (all
        at once) for the head's coming run id; 3. start the head's rank. Raises
        PreflightFailed when a worker cannot start (the others are stopped again)."""
        mode = self.policy.modes[rung]
        run_id = new_run_id()
        await self._stop_workers(reason="clearing before a start", kill=True)
        workers = self.policy.engine.nodes[1:]
        timeout = self.policy.engine.distributed.worker_start_timeout_seconds
        body = {"mode": mode.name, "run_id": run_id, "start_args": [list(a) for a in start_args]}
        results = await asyncio.gather(*(self._order(n, "/v1/node/rank/start", body, timeout)
                                         for n in workers), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        for node, result in zip(workers, results, strict=True):
            if not isinstance(result, BaseException):
                self._mark(node.name)
                logger.info("node %s: rank started for run %s (pid %s, NCCL_IB_GID_INDEX %s: "
                            "%s)", node.name, run_id, result.get("pid"),
                            result.get("gid_index"), result.get("gid_note"))
        if failed:
            await self._stop_workers(reason="a worker could not start", kill=True)
            exc = failed[0]
            if isinstance(exc, PreflightFailed):
                if self._on_held is not None:
                    self._on_held(exc.node, str(exc))
                raise exc
            raise PreflightFailed(str(exc), node="?")
        self._mark(self.policy.engine.nodes[0].name)
        return await self.launcher.start(
            rung=rung, start_args=(*start_args, *head_start_args(self.policy)), run_id=run_id)

    def _mark(self, name: str) -> None:
        self.order = [*self.order[-31:], (name, time.monotonic())]

    async def close(self) -> None:
        """Close the agents' client (the ranks are stopped by ``stop``)."""
        if self._http is not None:
            await self._http.aclose()

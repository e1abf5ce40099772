"""The one engine handle of the service: the launcher, or (``engine.nodes`` set) a
``NodesEngine`` over it, built before the parts that use it (issue 30: no part is
swapped after construction).

With nodes, the sensors get a ``NodePoller`` (each worker node's samples into
``Sample.nodes``) and the executor the ``NodesEngine``, so that every kill, stop and
start reaches every rank. A start held by a worker node becomes an incident naming the
node. One box: the launcher itself, no poller.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from agent_supervisor.act.incident import Incident
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.act.nodes import NodesEngine
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder
from agent_supervisor.sense.nodes import NodePoller

__all__ = ["EngineHandle", "engine_handle"]


@dataclass(frozen=True)
class EngineHandle:
    """``engine``: what acts on the engine (the executor's, the shutdown's); ``nodes``:
    the ``NodesEngine`` when the engine spans boxes (else None); ``poller``: the worker
    nodes' sampler for the sensors (else None)."""

    engine: EngineLauncher | NodesEngine
    nodes: NodesEngine | None
    poller: NodePoller | None


def engine_handle(holder: PolicyHolder, launcher: EngineLauncher, recorder: Recorder,
                  ladder: Ladder) -> EngineHandle:
    """The launcher alone for one box; with ``engine.nodes``, a ``NodesEngine`` over it
    whose held starts become ``preflight_failed`` incidents, and a ``NodePoller``."""
    if not holder.current.engine.nodes:
        return EngineHandle(launcher, None, None)

    def held(node: str, message: str) -> None:
        run = launcher.run
        recorder.incident(Incident(
            kind="preflight_failed", severity="warning", started_at=datetime.now(UTC),
            action="hold", explanation=f"start held: {message}", node=node,
            mode=holder.current.modes[ladder.rung].name, rung=ladder.rung,
            run_id=run.run_id if run is not None else None,
            findings=[{"kind": "preflight_failed", "evidence": {"node": node,
                                                                 "check": "rank_start"}}]))

    engine = NodesEngine(holder, launcher, on_held=held)
    return EngineHandle(engine, engine, NodePoller(holder))

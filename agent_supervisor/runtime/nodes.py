"""Wiring an engine across boxes into the service (``engine.nodes`` set).

The sensors get a ``NodePoller`` (each worker node's samples into ``Sample.nodes``) and
the executor a ``NodesEngine`` in place of the bare launcher, so that every kill, stop
and start reaches every rank. A start held by a worker node becomes an incident naming
the node. One box: nothing changes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from agent_supervisor.act.effects import Executor
from agent_supervisor.act.incident import Incident
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.act.nodes import NodesEngine
from agent_supervisor.policy_holder import PolicyHolder
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.sense.nodes import NodePoller

__all__ = ["attach_nodes"]


class ServiceParts(Protocol):
    """What ``attach_nodes`` needs of the service (``agent_supervisor.service.Supervisor``)."""

    holder: PolicyHolder
    sensors: Sensors
    executor: Executor
    launcher: EngineLauncher
    recorder: Recorder
    ladder: Ladder


def attach_nodes(sup: ServiceParts) -> NodesEngine | None:
    """Give the service's sensors and executor the worker nodes; returns the NodesEngine,
    or None for one box."""
    holder, sensors, executor = sup.holder, sup.sensors, sup.executor
    launcher, recorder, ladder = sup.launcher, sup.recorder, sup.ladder
    if not holder.current.engine.nodes:
        return None
    sensors.nodes = NodePoller(holder)

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
    executor.launcher = engine
    return engine

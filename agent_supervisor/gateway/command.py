"""The gateway process's command line, shared by ``supervisor gateway``
(agent_supervisor/commands/gateway.py) and ``python -m agent_supervisor gateway``, the
command ``supervisor run`` and a gateway's hand-over start (agent_supervisor/gateway/
process.py ``gateway_argv``), which agent_supervisor/__main__.py sends straight to ``main``
here: the same process without loading the command line's modules (the store, SQLAlchemy,
every other command: a third of the CPU it needs to start, 0.8 s -> 0.5 s on a 2-core box,
and their memory for its whole life). This module imports nothing but the standard
library and agent_supervisor/logs.py, so the ``supervisor`` parser stays light too."""

from __future__ import annotations

import argparse
from pathlib import Path

from agent_supervisor.logs import setup_logging

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--policy FILE`` (required), ``--owner external|supervisor``, ``--base-dir DIR``."""
    parser.add_argument("--policy", required=True, type=Path, help="the fleet's policy file")
    parser.add_argument("--owner", default="external", choices=["external", "supervisor"],
                        help="supervisor: started by `supervisor run`, which stops it at its "
                        "own clean stop; external: left running (systemd's unit)")
    parser.add_argument("--base-dir", type=Path, default=None,
                        help="resolve the policy's relative paths against this directory "
                        "(default: the file's; run passes it with the policy it wrote for a "
                        "policy given in memory)")


def main(argv: list[str]) -> int:
    """``python -m agent_supervisor gateway ARGS``: parse ``argv`` (the arguments after
    ``gateway``), log as the ``supervisor`` command does by default (info, text), serve
    until SIGTERM; returns the exit status (agent_supervisor/gateway/process.py ``serve``)."""
    parser = argparse.ArgumentParser(prog="supervisor gateway",
                                     description="the gateway as its own process")
    add_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging("info")
    from agent_supervisor.gateway.process import serve

    return serve(args.policy, owner=args.owner, base_dir=args.base_dir)

"""``supervisor run --policy FILE [--record TRACE]``: the service, until SIGTERM.

SIGTERM/SIGINT stop it cleanly, SIGHUP reloads the policy, SIGUSR1 exits leaving the
engine and the gateway process running for the next life to adopt (an upgrade: start
the new build after it). Exit status: ``Supervisor.run``'s
(0 clean, 1 gave up, 2 a listener could not bind); 2 as well, with the holder's PID,
when another supervisor already runs with this policy's state directory (nothing is
recorded then).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from agent_supervisor import __version__
from agent_supervisor.commands.common import EXIT_USAGE, open_store
from agent_supervisor.errors import AlreadyRunning
from agent_supervisor.policy import Policy, load_policy_file

__all__ = ["main", "run_service"]

logger = logging.getLogger("agent_supervisor")


async def run_service(policy: Policy, trace: Path | None = None,
                      policy_path: Path | None = None) -> int:
    """Run the service in this loop; returns its exit status."""
    from agent_supervisor.record.database import safe_url
    from agent_supervisor.service import Supervisor

    os.umask(0o077)   # issue 17: database, WAL, logs, spool, traces 0600, directories 0700
    store = await asyncio.to_thread(open_store, policy)
    try:
        sup = Supervisor(policy, store, trace_path=trace, policy_path=policy_path)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, sup.request_stop, f"{signal.Signals(sig).name} received")
        reloads: set[asyncio.Task[bool]] = set()

        def on_hup() -> None:
            task = loop.create_task(sup.reload("SIGHUP"))
            reloads.add(task)
            task.add_done_callback(reloads.discard)

        loop.add_signal_handler(signal.SIGHUP, on_hup)
        loop.add_signal_handler(signal.SIGUSR1, lambda: sup.request_stop(
            "SIGUSR1 received (an upgrade: the engine and the gateway stay)", detach=True))
        logger.info("supervisor %s: fleet %s, %d modes, database %s", __version__,
                    policy.fleet, len(policy.modes), safe_url(policy.database_url))
        try:
            return await sup.run()
        except AlreadyRunning as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    finally:
        store.close()


def main(args: argparse.Namespace) -> int:
    """``supervisor run``."""
    import uvloop

    policy = load_policy_file(args.policy)
    return uvloop.run(run_service(policy, args.record, args.policy))

"""``supervisor run --policy FILE [--record TRACE] [--advise]``: the service, until SIGTERM
(``--advise``: advisory mode, agent_supervisor/act/advice.py).

SIGTERM/SIGINT stop it cleanly, SIGHUP reloads the policy, SIGUSR1 exits leaving the
engine and the gateway process running for the next life to adopt (an upgrade: start
the new build after it). Exit status: ``Supervisor.run``'s
(0 clean, 1 gave up, 2 a listener could not bind); 2 as well, with the holder's PID,
when another supervisor already runs with this policy's state directory (nothing is
recorded then). A SQLite record that is not a database is moved aside and the service
runs on a fresh one, with a ``record_corrupt`` incident (``record/corrupt.py``, issue 34).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from agent_supervisor import __version__
from agent_supervisor.act.incident import Incident
from agent_supervisor.commands.common import EXIT_USAGE, open_store
from agent_supervisor.errors import AlreadyRunning, StoreError
from agent_supervisor.policy import Policy, load_policy_file
from agent_supervisor.record.corrupt import is_corrupt, move_aside, sqlite_file
from agent_supervisor.record.store import Store
from agent_supervisor.runtime.lock import InstanceLock

__all__ = ["main", "open_or_move_aside", "run_service"]

logger = logging.getLogger("agent_supervisor")


async def run_service(policy: Policy, trace: Path | None = None,
                      policy_path: Path | None = None, advise: bool | None = None) -> int:
    """Run the service in this loop; returns its exit status. ``advise``: advisory mode
    whatever the policy says (``--advise``; None: the policy's ``mode``)."""
    from agent_supervisor.record.database import safe_url
    from agent_supervisor.service import Supervisor

    os.umask(0o077)   # issue 17: database, WAL, logs, spool, traces 0600, directories 0700
    try:
        store, corrupt = await asyncio.to_thread(open_or_move_aside, policy)
    except AlreadyRunning as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        sup = Supervisor(policy, store, trace_path=trace, policy_path=policy_path,
                         advise=advise)
        if corrupt is not None:
            sup.recorder.incident(corrupt)
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


def open_or_move_aside(policy: Policy) -> tuple[Store, Incident | None]:
    """The policy's store, and None; or, when its SQLite file is not a usable database
    (``record.corrupt.is_corrupt``), a fresh store after moving the file aside, and the
    ``record_corrupt`` incident to record. The file is moved only while this process
    holds the state directory's lock (released before returning: ``Supervisor.run``
    takes it again).

    Raises: StoreError (any other failure, or a fresh database that fails too);
    AlreadyRunning when another supervisor holds the lock (the file is left alone);
    OSError when the rename is refused."""
    try:
        return open_store(policy), None
    except StoreError as exc:
        path = sqlite_file(policy.database_url)
        if path is None or not path.exists() or not is_corrupt(exc):
            raise
        error = str(exc)
    lock = InstanceLock(policy.state_directory)
    lock.acquire()
    try:
        now = datetime.now(UTC)
        moved = move_aside(path, now=now)
        logger.error("the record %s is not a usable database (%s): moved aside to %s; "
                     "supervising on a fresh one", path, error, moved)
        store = open_store(policy)
    finally:
        lock.release()
    return store, Incident(
        kind="record_corrupt", severity="critical", started_at=now, action="move_aside",
        outcome="a fresh database", findings=[{"path": str(path), "moved_to": str(moved),
                                               "error": error}],
        explanation=f"the record {path} was not a usable database; moved aside to "
                    f"{moved} (earlier incidents are there), supervising on a fresh one")


def main(args: argparse.Namespace) -> int:
    """``supervisor run``."""
    import uvloop

    policy = load_policy_file(args.policy)
    return uvloop.run(run_service(policy, args.record, args.policy,
                                  getattr(args, "advise", None)))

"""``supervisor fleet --database URL``: every supervisor writing to one database.

One line per (fleet, host): its rung and mode at the last heartbeat, the engine's state,
the heartbeat's age, whether it is alive (heartbeat younger than ``--stale-after``),
stopped cleanly or lost, and its last incident (with the node it named, for an engine
across boxes). ``--json`` prints the same as a JSON array. Exit 0; 1 when the database
cannot be read.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from agent_supervisor.commands.common import EXIT_OK
from agent_supervisor.commands.helpfmt import HelpfulParser

__all__ = ["add_parser", "fleet_table", "run"]

#: A heartbeat older than this (three default heartbeats) reads as "lost".
STALE_AFTER_SECONDS = 90.0


def add_parser(sub: Any) -> HelpfulParser:
    """The ``fleet`` subcommand."""
    p: HelpfulParser = sub.add_parser("fleet", help="every supervisor writing to one database: "
                                      "rung, last incident, heartbeat age")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--database", metavar="URL", help="the shared database's SQLAlchemy URL "
                     "(postgresql+psycopg://...; default: none, then --policy)")
    src.add_argument("--policy", help="take the database from this policy file "
                     "(storage.database_url or its file; default: none)")
    p.add_argument("--fleet", help="only this fleet (default: every fleet)")
    p.add_argument("--stale-after", type=float, default=STALE_AFTER_SECONDS,
                   help="seconds after which a heartbeat reads as lost")
    p.add_argument("--json", action="store_true", help="JSON instead of a table")
    return p


def _state(member: Any, stale_after: float) -> str:
    if member.stopped:
        return "stopped"
    age = member.heartbeat_age_seconds
    return "lost" if age is None or age > stale_after else "alive"


def fleet_table(members: list[Any], stale_after: float) -> str:
    """The table ``supervisor fleet`` prints."""
    from agent_supervisor.show.tables import table

    rows = []
    for m in members:
        age = None if m.heartbeat_age_seconds is None else f"{m.heartbeat_age_seconds:.0f}s"
        last = None
        if m.last_incident_kind is not None:
            node = f" [{m.last_incident_node}]" if m.last_incident_node else ""
            last = (f"{m.last_incident_kind}{node} ({m.last_incident_severity}, "
                    f"{m.last_incident_at:%Y-%m-%d %H:%M:%S})")
        rows.append([m.host, m.fleet, m.rung, m.mode, m.engine_state, age,
                     _state(m, stale_after), last])
    return table(["host", "fleet", "rung", "mode", "engine", "heartbeat", "supervisor",
                  "last incident"], rows)


def run(args: argparse.Namespace) -> int:
    """``supervisor fleet``."""
    from agent_supervisor.policy import load_policy_file
    from agent_supervisor.record.fleet import fleet_members
    from agent_supervisor.record.store import Store

    url = args.database or load_policy_file(args.policy).database_url
    store = Store.open(url, fleet=args.fleet or "fleet")
    try:
        with store.session() as s:
            members = fleet_members(s, now=datetime.now(UTC), fleet=args.fleet)
    finally:
        store.close()
    if args.json:
        print(json.dumps([{**m.to_dict(), "supervisor": _state(m, args.stale_after)}
                          for m in members], indent=2))
    else:
        print(fleet_table(members, args.stale_after))
    return EXIT_OK

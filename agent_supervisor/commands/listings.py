"""The read-only commands over the store: ``incidents``, ``incident``, ``history``,
``export``, ``runs``, ``report``. Each opens the policy's store and closes it."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta

from agent_supervisor.commands.common import EXIT_FAILED, EXIT_OK, since, store_of
from agent_supervisor.policy import load_policy_file

__all__ = ["export", "history", "incident", "incidents", "report", "runs"]

#: ``report`` reads at most this many incidents of its period.
REPORT_LIMIT = 100_000


def incidents(args: argparse.Namespace) -> int:
    """``supervisor incidents``: recorded incidents, newest first."""
    from agent_supervisor.show.tables import incidents_json, incidents_table

    with store_of(load_policy_file(args.policy)) as store:
        rows = store.incidents(since=since(args.since), kind=args.kind, limit=args.limit)
        print(incidents_json(rows) if args.json else incidents_table(rows))
    return EXIT_OK


def incident(args: argparse.Namespace) -> int:
    """``supervisor incident ID``: one incident in full."""
    from agent_supervisor.record.queries import incident as one_incident
    from agent_supervisor.record.queries import incident_transitions
    from agent_supervisor.show.export import incident_dict
    from agent_supervisor.show.incident import incident_detail

    with store_of(load_policy_file(args.policy)) as store:
        row = one_incident(store=store, incident_id=args.id)
        if row is None:
            print(f"error: no incident {args.id}", file=sys.stderr)
            return EXIT_FAILED
        if args.json:
            print(json.dumps(incident_dict(row), indent=2, default=str))
        else:
            print(incident_detail(row, incident_transitions(store=store, incident_id=row.id)))
    return EXIT_OK


def history(args: argparse.Namespace) -> int:
    """``supervisor history``: the mode timeline."""
    from agent_supervisor.record.queries import timeline
    from agent_supervisor.show.history import history_table

    with store_of(load_policy_file(args.policy)) as store:
        rows = timeline(store=store, since=since(args.since), limit=args.limit)
        if args.json:
            from agent_supervisor.show.export import transition_dict

            print(json.dumps({"transitions": [transition_dict(r) for r in rows]}, indent=2))
        else:
            print(history_table(rows))
    return EXIT_OK


def export(args: argparse.Namespace) -> int:
    """``supervisor export``: records as CSV or JSON."""
    from agent_supervisor.record.queries import engine_runs, timeline
    from agent_supervisor.record.service_runs import service_runs
    from agent_supervisor.record.telemetry import telemetry
    from agent_supervisor.show.export import export_rows

    start = since(args.since)
    with store_of(load_policy_file(args.policy)) as store:
        match args.what:
            case "incidents":
                rows = store.incidents(since=start, kind=args.kind, limit=args.limit)
            case "transitions":
                rows = timeline(store=store, since=start, limit=args.limit)
            case "runs":
                rows = engine_runs(store=store, since=start)[:args.limit]
            case "services":
                rows = service_runs(store=store, limit=args.limit)
            case _:
                rows = telemetry(store=store, since=start or datetime.now(UTC)
                                 - timedelta(days=1))[:args.limit]
        print(export_rows(rows, what=args.what, fmt=args.format))
    return EXIT_OK


def runs(args: argparse.Namespace) -> int:
    """``supervisor runs``: recorded engine runs, newest first."""
    from agent_supervisor.show.tables import runs_json, runs_table

    with store_of(load_policy_file(args.policy)) as store:
        rows = store.runs(limit=args.limit)
        print(runs_json(rows) if args.json else runs_table(rows))
    return EXIT_OK


def report(args: argparse.Namespace) -> int:
    """``supervisor report``: what was done and what advise mode would have done, how
    often and why (agent_supervisor/show/report.py)."""
    from agent_supervisor.show.report import report_json, report_summary, report_text

    start = since(args.since)
    with store_of(load_policy_file(args.policy)) as store:
        summary = report_summary(store.incidents(since=start, limit=REPORT_LIMIT), start)
    print(report_json(summary) if args.json else report_text(summary))
    return EXIT_OK

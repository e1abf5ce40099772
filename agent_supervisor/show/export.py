"""``supervisor export``: incidents, transitions, engine runs or telemetry as CSV or JSON.

One mapping per row with every column (times ISO 8601 UTC). JSON: an array of objects,
lists and evidence kept as JSON. CSV: one header line, then one line per row; list and
object values (findings, argv, kernel lines) are written as JSON text in their cell,
unknown values as empty cells.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from agent_supervisor.record.models import (
    EngineRunRow,
    IncidentRow,
    ModeTransitionRow,
    ServiceRunRow,
    TelemetryRow,
)

__all__ = [
    "EXPORTS",
    "FORMATS",
    "export_rows",
    "incident_dict",
    "run_dict",
    "service_run_dict",
    "telemetry_dict",
    "transition_dict",
]

FORMATS = ("csv", "json")


def _iso(dt: datetime | None) -> str | None:
    return None if dt is None else dt.isoformat()


def incident_dict(r: IncidentRow) -> dict[str, Any]:
    """Every column of an incident."""
    return {
        "id": r.id, "fleet": r.fleet, "host": r.host, "kind": r.kind, "severity": r.severity,
        "started_at": _iso(r.started_at), "ended_at": _iso(r.ended_at), "mode": r.mode,
        "rung": r.rung, "run_id": r.run_id, "action": r.action, "outcome": r.outcome,
        "explanation": r.explanation, "findings": r.findings,
        "kernel_lines": r.kernel_lines or [], "log_tail": r.log_tail,
    }


def transition_dict(r: ModeTransitionRow) -> dict[str, Any]:
    """Every column of a mode transition."""
    return {
        "id": r.id, "fleet": r.fleet, "host": r.host, "at": _iso(r.at),
        "from_mode": r.from_mode, "to_mode": r.to_mode, "from_rung": r.from_rung,
        "to_rung": r.to_rung, "actor": r.actor, "reason": r.reason,
        "incident_id": r.incident_id,
    }


def run_dict(r: EngineRunRow) -> dict[str, Any]:
    """Every column of an engine run (argv as stored: secrets masked)."""
    return {
        "run_id": r.run_id, "fleet": r.fleet, "host": r.host, "mode": r.mode, "rung": r.rung,
        "argv": r.argv, "pid": r.pid, "port": r.port, "log_path": r.log_path,
        "started_at": _iso(r.started_at), "ready_at": _iso(r.ready_at),
        "ended_at": _iso(r.ended_at), "startup_seconds": r.startup_seconds,
        "exit_code": r.exit_code, "exit_signal": r.exit_signal,
        "planned_stop": r.planned_stop, "outcome": r.outcome, "error": r.error,
        "engine_version": r.engine_version,
    }


def service_run_dict(r: ServiceRunRow) -> dict[str, Any]:
    """Every column of one life of the supervisor."""
    return {
        "service_run_id": r.service_run_id, "fleet": r.fleet, "host": r.host, "pid": r.pid,
        "boot_id": r.boot_id, "started_at": _iso(r.started_at),
        "heartbeat_at": _iso(r.heartbeat_at), "stopped_at": _iso(r.stopped_at),
        "exit_code": r.exit_code, "policy_path": r.policy_path, "version": r.version,
    }


def telemetry_dict(r: TelemetryRow) -> dict[str, Any]:
    """Every column of a telemetry row but its id."""
    out = {c.name: getattr(r, c.name) for c in TelemetryRow.__table__.columns if c.name != "id"}
    out["at"] = _iso(r.at)
    return out


#: ``--what`` -> the function making a row's mapping.
EXPORTS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "incidents": incident_dict, "transitions": transition_dict, "runs": run_dict,
    "services": service_run_dict, "telemetry": telemetry_dict,
}


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list | dict | tuple):
        return json.dumps(value, separators=(",", ":"), default=str)
    return value


def export_rows(rows: Sequence[Any], *, what: str, fmt: str) -> str:
    """``rows`` (as the store returns them) as ``fmt`` text (``csv`` or ``json``).

    Raises: ValueError for an unknown ``what`` or ``fmt`` (naming the valid ones).
    """
    if what not in EXPORTS:
        raise ValueError(f"--what must be one of {', '.join(EXPORTS)}, not {what!r}")
    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    dicts = [EXPORTS[what](r) for r in rows]
    if fmt == "json":
        return json.dumps(dicts, indent=2, default=str)
    buf = io.StringIO()
    row_for_header = dicts[0] if dicts else EXPORTS[what](_Blank())
    writer = csv.DictWriter(buf, fieldnames=list(row_for_header), lineterminator="\n")
    writer.writeheader()
    for d in dicts:
        writer.writerow({k: _cell(v) for k, v in d.items()})
    return buf.getvalue()


class _Blank:
    """Answers None to every attribute: the header of an empty CSV export."""

    def __getattr__(self, name: str) -> None:
        return None

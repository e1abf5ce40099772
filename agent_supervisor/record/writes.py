"""Row writes inside one open session: the single place records become rows.

``Store.apply`` calls these (``apply_to_session``), so a record written at once and one
replayed from the spool produce the same rows. Secrets are masked here, before anything is written
(``privacy``). Raises StoreError for a write that can never succeed (an unknown run or
column); database errors surface as SQLAlchemy exceptions for the caller to translate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.errors import StoreError
from agent_supervisor.privacy import mask_argv, mask_json, mask_text
from agent_supervisor.record.models import (
    EngineRunRow,
    IncidentRow,
    ModeBaselineRow,
    ModeTransitionRow,
    ServiceRunRow,
    TelemetryRow,
)
from agent_supervisor.record.records import (
    AddBaseline,
    AddIncident,
    AddRun,
    AddTelemetry,
    AddTransition,
    Record,
    ServiceHeartbeat,
    StartService,
    StopService,
    TelemetryPoint,
    UpdateRun,
)
from agent_supervisor.telemetry.finite import json_finite

__all__ = [
    "UPDATABLE_RUN_COLUMNS",
    "apply_to_session",
    "insert_incident",
    "insert_run",
    "insert_telemetry",
    "insert_transition",
    "update_run",
]

#: Columns of engine_runs an update may set (identity columns are fixed at launch).
UPDATABLE_RUN_COLUMNS = frozenset(
    c.name for c in EngineRunRow.__table__.columns
    if c.name not in {"id", "run_id", "fleet", "host"})


def insert_run(session: Session, *, fleet: str, host: str, record: AddRun) -> None:
    """Add the engine run of ``record`` with its argv masked."""
    session.add(EngineRunRow(
        run_id=record.run_id, fleet=fleet, host=host, mode=record.mode, rung=record.rung,
        argv=mask_argv(record.argv), pid=record.pid, port=record.port,
        log_path=record.log_path, started_at=record.started_at,
        engine_version=record.engine_version,
        mem_available_before_bytes=record.mem_available_before_bytes))


def update_run(session: Session, *, run_id: str, values: dict[str, Any]) -> None:
    """Set columns of the run ``run_id``. Raises StoreError for an unknown run or column."""
    unknown = sorted(set(values) - UPDATABLE_RUN_COLUMNS)
    if unknown:
        raise StoreError(f"engine_runs has no column {unknown[0]!r} to update")
    row = session.scalars(select(EngineRunRow).where(EngineRunRow.run_id == run_id)).first()
    if row is None:
        raise StoreError(f"no engine run {run_id!r}")
    for key, value in values.items():
        if key == "argv":
            value = mask_argv(value)
        elif key == "error":
            value = mask_text(value)
        setattr(row, key, value)


def _masked(value: Any) -> Any:
    """``value`` (JSON-like) with secrets masked (``privacy.mask_json``: strings through
    ``mask_text``, argument vectors through ``mask_argv``, secret-named keys replaced)
    and NaN and infinities made None (JSON has neither: PostgreSQL refused such
    incidents, issue 34)."""
    return json_finite(mask_json(value))


def insert_incident(session: Session, *, fleet: str, host: str, incident: Incident) -> int:
    """Add ``incident`` with its text masked (explanation, outcome, the strings in its
    findings, log tail: issue 17, a refused reload stored an engine ``--api-key`` and an
    ``HF_TOKEN`` from the validation error); returns its id."""
    row = IncidentRow(
        fleet=fleet, host=host, kind=incident.kind, severity=incident.severity,
        started_at=incident.started_at, ended_at=incident.ended_at, mode=incident.mode,
        rung=incident.rung, run_id=incident.run_id, action=incident.action,
        outcome=mask_text(incident.outcome), explanation=mask_text(incident.explanation),
        findings=[_masked(f) for f in incident.findings], log_tail=mask_text(incident.log_tail),
        kernel_lines=list(incident.kernel_lines), node=incident.node_name)
    session.add(row)
    session.flush()
    return row.id


def insert_transition(session: Session, *, fleet: str, host: str, transition: Transition,
                      incident_id: int | None = None) -> int:
    """Add a mode transition, optionally pointing at its incident; returns its id."""
    row = ModeTransitionRow(fleet=fleet, host=host, incident_id=incident_id,
                            **dataclasses.asdict(transition))
    session.add(row)
    session.flush()
    return row.id


def insert_telemetry(session: Session, *, fleet: str, host: str,
                     points: Sequence[TelemetryPoint]) -> int:
    """Add telemetry rows (one INSERT for the batch); returns how many."""
    if points:
        session.execute(TelemetryRow.__table__.insert(), [
            {"fleet": fleet, "host": host, **dataclasses.asdict(p)} for p in points])
    return len(points)


def _service_run(session: Session, service_run_id: str) -> ServiceRunRow:
    row = session.scalars(select(ServiceRunRow).where(
        ServiceRunRow.service_run_id == service_run_id)).first()
    if row is None:
        raise StoreError(f"no service run {service_run_id!r}")
    return row


def apply_to_session(session: Session, *, fleet: str, host: str, record: Record) -> None:
    """Write ``record`` in ``session`` (the caller owns the transaction and the key).

    Raises: StoreError for a record that can never apply (unknown run, unknown type).
    """
    match record:
        case AddRun():
            insert_run(session, fleet=fleet, host=host, record=record)
        case UpdateRun():
            update_run(session, run_id=record.run_id, values=record.values)
        case AddIncident():
            incident_id = insert_incident(session, fleet=fleet, host=host,
                                          incident=record.incident)
            if record.transition is not None:
                insert_transition(session, fleet=fleet, host=host,
                                  transition=record.transition, incident_id=incident_id)
        case AddTransition():
            insert_transition(session, fleet=fleet, host=host, transition=record.transition)
        case AddTelemetry():
            insert_telemetry(session, fleet=fleet, host=host, points=record.points)
        case AddBaseline():
            values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)
                      if f.name != "key"}
            session.add(ModeBaselineRow(fleet=fleet, host=host, **values))
        case StartService():
            session.add(ServiceRunRow(
                service_run_id=record.service_run_id, fleet=fleet, host=host,
                pid=record.pid, boot_id=record.boot_id, started_at=record.started_at,
                heartbeat_at=record.started_at, policy_path=record.policy_path,
                version=record.version))
        case ServiceHeartbeat():
            row = _service_run(session, record.service_run_id)
            if row.heartbeat_at is None or record.at > row.heartbeat_at:
                row.heartbeat_at = record.at
                if record.rung is not None:
                    row.rung, row.mode = record.rung, record.mode
                    row.engine_state = record.engine_state
        case StopService():
            row = _service_run(session, record.service_run_id)
            row.stopped_at = record.at
            row.heartbeat_at = record.at
            row.exit_code = record.exit_code
        case _:
            raise StoreError(f"unknown record {type(record).__name__}")

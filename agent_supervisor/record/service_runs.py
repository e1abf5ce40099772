"""Lives of the supervisor process: start, heartbeat, clean stop, and the one before.

A row in ``service_runs`` per life. ``stopped_at`` is written only by a clean stop, so
the previous life of this fleet on this host without it was killed or lost its host
(``agent_supervisor.record.unclean`` decides which). These functions write synchronously with
``Store.apply``; the running service sends the same records (``StartService``,
``ServiceHeartbeat``, ``StopService``) through its ``RecordWriter`` so they are spooled
when the database is down.
"""

from __future__ import annotations

import os
from datetime import datetime

from sqlalchemy import select

from agent_supervisor.record.models import EngineRunRow, ServiceRunRow
from agent_supervisor.record.records import ServiceHeartbeat, StartService, StopService, new_key
from agent_supervisor.record.store import Store

__all__ = [
    "heartbeat_service_run",
    "last_engine_run",
    "previous_service_run",
    "service_runs",
    "start_service_run",
    "stop_service_run",
]


def start_service_run(*, store: Store, boot_id: str | None, started_at: datetime,
                      policy_path: str | None = None, version: str | None = None,
                      pid: int | None = None) -> StartService:
    """Record the start of this life now; returns the record (its ``service_run_id``
    names this life in heartbeats and the stop). Raises StoreError."""
    record = StartService(service_run_id=new_key(), pid=os.getpid() if pid is None else pid,
                          boot_id=boot_id, started_at=started_at, policy_path=policy_path,
                          version=version)
    store.apply(record)
    return record


def heartbeat_service_run(*, store: Store, service_run_id: str, at: datetime) -> None:
    """This life was alive at ``at`` (UTC). Raises StoreError."""
    store.apply(ServiceHeartbeat(service_run_id=service_run_id, at=at))


def stop_service_run(*, store: Store, service_run_id: str, at: datetime,
                     exit_code: int) -> None:
    """The clean-stop marker: this life stopped on purpose. Raises StoreError."""
    store.apply(StopService(service_run_id=service_run_id, at=at, exit_code=exit_code))


def previous_service_run(*, store: Store,
                         exclude_service_run_id: str | None = None) -> ServiceRunRow | None:
    """The newest life of this fleet on this host other than ``exclude_service_run_id``
    (the current one), clean or not; None on a first start. Only the newest matters: an
    older unclean life was reported by the life after it."""
    with store.session() as s:
        q = select(ServiceRunRow).where(ServiceRunRow.fleet == store.fleet,
                                        ServiceRunRow.host == store.host)
        if exclude_service_run_id is not None:
            q = q.where(ServiceRunRow.service_run_id != exclude_service_run_id)
        return s.scalars(q.order_by(ServiceRunRow.started_at.desc(),
                                    ServiceRunRow.id.desc()).limit(1)).first()


def service_runs(*, store: Store, limit: int = 50) -> list[ServiceRunRow]:
    """This fleet's service lives (every host), newest first."""
    with store.session() as s:
        q = (select(ServiceRunRow).where(ServiceRunRow.fleet == store.fleet)
             .order_by(ServiceRunRow.started_at.desc(), ServiceRunRow.id.desc()).limit(limit))
        return list(s.scalars(q))


def last_engine_run(*, store: Store) -> EngineRunRow | None:
    """The newest engine run of this fleet on this host, or None."""
    with store.session() as s:
        q = (select(EngineRunRow).where(EngineRunRow.fleet == store.fleet,
                                        EngineRunRow.host == store.host)
             .order_by(EngineRunRow.id.desc()).limit(1))
        return s.scalars(q).first()

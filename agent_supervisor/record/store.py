"""The incident store: engine runs, incidents, mode transitions, baselines, through
SQLAlchemy 2; ``apply`` writes any record (``records``) exactly once, and is the one
write path for runs, incidents, transitions, telemetry and service lives (tests write
through it too; only calibration's ``add_baseline`` writes beside it).

SQLite (WAL, busy timeout) is the default; PostgreSQL works with the same code for a
fleet sharing one database (rows carry the fleet and host name). Calls are synchronous
and short; async callers run them with ``asyncio.to_thread``. SQLAlchemy errors are
translated to ``StoreError`` here, once (engines and migrations: ``database``). More
reads and writes live beside it as functions taking ``store=``: ``service_runs``,
``telemetry``, ``queries``, ``retention``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from agent_supervisor.act.incident import Incident
from agent_supervisor.errors import StoreError
from agent_supervisor.record import writes
from agent_supervisor.record.database import (
    SQLITE_BUSY_TIMEOUT_MS,
    downgrade,
    is_unavailable,
    make_engine,
    upgrade,
)
from agent_supervisor.record.models import (
    AppliedRecordRow,
    EngineRunRow,
    IncidentRow,
    ModeBaselineRow,
    ModeTransitionRow,
)
from agent_supervisor.record.records import Record

__all__ = [
    "SQLITE_BUSY_TIMEOUT_MS", "Incident", "Store", "downgrade",
    "is_unavailable", "make_engine", "upgrade",
]

class Store:
    """Reads and writes of one fleet's records on this host.

    ``Store.open(url, fleet=...)`` creates the engine and upgrades the schema. Every
    method opens its own short transaction. Raises StoreError on any database error.
    """

    def __init__(self, engine: Engine, *, fleet: str, host: str | None = None) -> None:
        self.engine = engine
        self.fleet = fleet
        self.host = host or socket.gethostname()
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._needs_upgrade = False

    @classmethod
    def open(cls, url: str, *, fleet: str, host: str | None = None,
             busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS, lazy: bool = False) -> Store:
        """Connect to ``url``, migrate it to the newest schema, return the Store.

        ``lazy``: a database that cannot be reached now (``is_unavailable``) is not an
        error: the Store migrates it on its first use that reaches it, and until then
        every call raises StoreError (so the service's writes are spooled). Raises
        StoreError for a bad URL, and without ``lazy`` for an unreachable database.
        """
        store = cls(make_engine(url, busy_timeout_ms=busy_timeout_ms), fleet=fleet, host=host)
        store._needs_upgrade = True
        try:
            store._ensure_schema()
        except StoreError as exc:
            if not (lazy and is_unavailable(exc)):
                store.close()
                raise
        return store

    def _ensure_schema(self) -> None:
        if self._needs_upgrade:
            upgrade(self.engine)
            self._needs_upgrade = False

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: commits on leaving, rolls back on an error.

        Raises: StoreError translated from any SQLAlchemy error (``is_unavailable`` tells
        a database that is down from a write that is wrong).
        """
        self._ensure_schema()
        try:
            with self._sessions.begin() as session:
                yield session
        except SQLAlchemyError as exc:
            raise StoreError(f"database {self.engine.url!r}: {exc}") from exc

    # -- engine runs ------------------------------------------------------------------

    def apply(self, record: Record) -> bool:
        """Write ``record`` and its idempotency key in one transaction.

        Returns: True when written, False when its key was applied before (nothing done).
        Raises: StoreError (``is_unavailable(exc)`` when the database is down or locked).
        """
        with self.session() as s:
            if s.get(AppliedRecordRow, record.key) is not None:
                return False
            writes.apply_to_session(s, fleet=self.fleet, host=self.host, record=record)
            s.add(AppliedRecordRow(key=record.key, kind=record.kind,
                                   applied_at=datetime.now(UTC)))
        return True

    def runs(self, *, limit: int = 50) -> list[EngineRunRow]:
        """The newest runs of this fleet, newest first."""
        with self.session() as s:
            q = (select(EngineRunRow).where(EngineRunRow.fleet == self.fleet)
                 .order_by(EngineRunRow.id.desc()).limit(limit))
            return list(s.scalars(q))

    def start_durations(self, *, limit: int = 200) -> list[tuple[str, float]]:
        """(mode, ready_at - started_at seconds) of this fleet's newest successful starts on
        this host, oldest first: what the start budget of each mode is learned from."""
        with self.session() as s:
            q = (select(EngineRunRow.mode, EngineRunRow.startup_seconds).where(
                EngineRunRow.fleet == self.fleet, EngineRunRow.host == self.host,
                EngineRunRow.startup_seconds.is_not(None))
                .order_by(EngineRunRow.id.desc()).limit(limit))
            return [(m, float(t)) for m, t in reversed(s.execute(q).all())]

    def unfinished_runs(self) -> list[EngineRunRow]:
        """Runs of this fleet on this host that never recorded an end (an earlier life
        of the service was killed, or the host went down, while they ran)."""
        with self.session() as s:
            q = select(EngineRunRow).where(
                EngineRunRow.fleet == self.fleet, EngineRunRow.host == self.host,
                EngineRunRow.ended_at.is_(None)).order_by(EngineRunRow.id)
            return list(s.scalars(q))

    # -- incidents and transitions ---------------------------------------------------

    def incidents(
        self, *, since: datetime | None = None, kind: str | None = None, limit: int = 100
    ) -> list[IncidentRow]:
        """This fleet's incidents, newest first, optionally since a time and of a kind."""
        with self.session() as s:
            q = select(IncidentRow).where(IncidentRow.fleet == self.fleet)
            if since is not None:
                q = q.where(IncidentRow.started_at >= since)
            if kind is not None:
                q = q.where(IncidentRow.kind == kind)
            return list(s.scalars(q.order_by(IncidentRow.id.desc()).limit(limit)))

    def transitions(self, *, limit: int = 100) -> list[ModeTransitionRow]:
        """This fleet's mode transitions, newest first."""
        with self.session() as s:
            q = (select(ModeTransitionRow).where(ModeTransitionRow.fleet == self.fleet)
                 .order_by(ModeTransitionRow.id.desc()).limit(limit))
            return list(s.scalars(q))

    # -- per-mode baselines ----------------------------------------------------------

    def add_baseline(
        self, *, mode: str, args_digest: str, concurrency: int, measured_at: datetime,
        tokens_per_second_per_request: float, tokens_per_second_total: float,
        ttft_seconds: float | None, acceptance_by_position: list[float] | None,
        peak_rss_bytes: int | None, mem_available_min_bytes: int | None, seconds: float,
        requests: int, source: str = "calibration", profile: str | None = None,
    ) -> None:
        """Record one measurement of ``mode`` at ``concurrency`` (``source``: calibration
        or run; ``profile``: a workload profile, None for the standard agent load)."""
        with self.session() as s:
            s.add(ModeBaselineRow(
                fleet=self.fleet, host=self.host, mode=mode, args_digest=args_digest,
                concurrency=concurrency, measured_at=measured_at,
                tokens_per_second_per_request=tokens_per_second_per_request,
                tokens_per_second_total=tokens_per_second_total, ttft_seconds=ttft_seconds,
                acceptance_by_position=acceptance_by_position, peak_rss_bytes=peak_rss_bytes,
                mem_available_min_bytes=mem_available_min_bytes, seconds=seconds,
                requests=requests, source=source, profile=profile))

    def baselines(self, *, source: str = "calibration",
                  profile: str | None = None) -> list[ModeBaselineRow]:
        """The newest baseline of each (mode, arguments, concurrency) on this host, of
        ``source`` and ``profile`` (default: calibration of the standard agent load)."""
        with self.session() as s:
            q = (select(ModeBaselineRow).where(ModeBaselineRow.fleet == self.fleet,
                                               ModeBaselineRow.host == self.host,
                                               ModeBaselineRow.source == source,
                                               ModeBaselineRow.profile.is_(None)
                                               if profile is None
                                               else ModeBaselineRow.profile == profile)
                 .order_by(ModeBaselineRow.id))
            newest: dict[tuple[str, str, int], ModeBaselineRow] = {}
            for row in s.scalars(q):
                newest[(row.mode, row.args_digest, row.concurrency)] = row
            return list(newest.values())

    def run_baselines(self, *, per_mode: int = 3) -> list[ModeBaselineRow]:
        """The newest ``per_mode`` rows of each (mode, arguments) from past good runs
        (``source`` run), newest first."""
        with self.session() as s:
            q = (select(ModeBaselineRow).where(ModeBaselineRow.fleet == self.fleet,
                                               ModeBaselineRow.host == self.host,
                                               ModeBaselineRow.source == "run")
                 .order_by(ModeBaselineRow.id.desc()))
            out: list[ModeBaselineRow] = []
            seen: dict[tuple[str, str], int] = {}
            for row in s.scalars(q):
                key = (row.mode, row.args_digest)
                if seen.get(key, 0) < per_mode:
                    seen[key] = seen.get(key, 0) + 1
                    out.append(row)
            return out

    def profile_baselines(self) -> list[ModeBaselineRow]:
        """The newest calibration row of each (mode, arguments, profile, concurrency)
        measured on a workload profile (``supervisor calibrate --profiles``)."""
        with self.session() as s:
            q = (select(ModeBaselineRow).where(ModeBaselineRow.fleet == self.fleet,
                                               ModeBaselineRow.host == self.host,
                                               ModeBaselineRow.source == "calibration",
                                               ModeBaselineRow.profile.is_not(None))
                 .order_by(ModeBaselineRow.id))
            newest: dict[tuple[str, str, str | None, int], ModeBaselineRow] = {}
            for row in s.scalars(q):
                newest[(row.mode, row.args_digest, row.profile, row.concurrency)] = row
            return list(newest.values())

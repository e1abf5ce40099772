"""The incident store: engine runs, incidents and mode transitions, through SQLAlchemy 2.

SQLite (WAL, busy timeout) is the default; PostgreSQL works with the same code for a
fleet sharing one database (rows carry the fleet and host name). Calls are synchronous
and short; async callers run them with ``asyncio.to_thread``. SQLAlchemy errors are
translated to ``StoreError`` here, once.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event, select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from supervisor.errors import StoreError
from supervisor.record.models import (
    EngineRunRow,
    IncidentRow,
    ModeBaselineRow,
    ModeTransitionRow,
)

__all__ = ["MIGRATIONS_DIR", "Incident", "Store", "make_engine", "upgrade"]

#: Alembic scripts, at the top of the repository (the design card's ``migrations/``).
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"

#: How long SQLite waits on a lock held by another writer before failing, in ms.
SQLITE_BUSY_TIMEOUT_MS = 5000


@dataclass(frozen=True)
class Incident:
    """One incident as the executor reports it (the value type that reaches the store).

    ``findings``: the guards' findings as dicts (``Finding.to_dict``), worst first.
    ``log_tail``: the last lines of the engine's log at the time, if any.
    ``kernel_lines``: the recent kernel log lines the sensors classified (Xid, OOM ...).
    """

    kind: str
    severity: str
    started_at: datetime
    action: str
    explanation: str
    mode: str | None = None
    rung: int | None = None
    run_id: str | None = None
    outcome: str | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    log_tail: str | None = None
    kernel_lines: list[str] = field(default_factory=list)


def make_engine(url: str) -> Engine:
    """A SQLAlchemy engine for ``url``; SQLite gets WAL, a busy timeout and foreign keys.

    Creates the parent directory of a SQLite file. Raises StoreError for a bad URL.
    """
    try:
        if url.startswith("sqlite"):
            path = url.split("///", 1)[1] if "///" in url else ""
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

            @event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn, _record) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.close()

            return engine
        return create_engine(url, pool_pre_ping=True)
    except (SQLAlchemyError, ValueError, OSError) as exc:
        raise StoreError(f"cannot open database {_safe(url)}: {exc}") from exc


def _safe(url: str) -> str:
    """The URL with any password masked, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "<unparsable database URL>"


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Run the Alembic migrations in ``migrations/`` up to ``revision`` on ``engine``.

    Raises: StoreError when the database refuses.
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    except SQLAlchemyError as exc:
        raise StoreError(f"migrating {engine.url!r} failed: {exc}") from exc


def downgrade(engine: Engine, revision: str) -> None:
    """Run the Alembic migrations down to ``revision`` (``base`` empties the schema)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, revision)
    except SQLAlchemyError as exc:
        raise StoreError(f"downgrading {engine.url!r} failed: {exc}") from exc


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

    @classmethod
    def open(cls, url: str, *, fleet: str, host: str | None = None) -> Store:
        """Connect to ``url``, migrate it to the newest schema, return the Store."""
        engine = make_engine(url)
        upgrade(engine)
        return cls(engine, fleet=fleet, host=host)

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        try:
            with self._sessions.begin() as session:
                yield session
        except SQLAlchemyError as exc:
            raise StoreError(f"database {self.engine.url!r}: {exc}") from exc

    # -- engine runs ------------------------------------------------------------------

    def add_run(
        self, *, run_id: str, mode: str, rung: int, argv: list[str], pid: int | None,
        port: int, log_path: str, started_at: datetime,
    ) -> None:
        """Record an engine run at launch."""
        with self._session() as s:
            s.add(EngineRunRow(
                run_id=run_id, fleet=self.fleet, host=self.host, mode=mode, rung=rung,
                argv=list(argv), pid=pid, port=port, log_path=log_path, started_at=started_at,
            ))

    def update_run(self, *, run_id: str, **values: Any) -> None:
        """Set columns of the run ``run_id`` (ready_at, ended_at, exit_code, outcome, ...).

        Raises: StoreError if there is no such run or a column name is unknown.
        """
        with self._session() as s:
            row = s.scalars(select(EngineRunRow).where(EngineRunRow.run_id == run_id)).first()
            if row is None:
                raise StoreError(f"no engine run {run_id!r}")
            for key, value in values.items():
                if not hasattr(EngineRunRow, key):
                    raise StoreError(f"engine_runs has no column {key!r}")
                setattr(row, key, value)

    def runs(self, *, limit: int = 50) -> list[EngineRunRow]:
        """The newest runs of this fleet, newest first."""
        with self._session() as s:
            q = (select(EngineRunRow).where(EngineRunRow.fleet == self.fleet)
                 .order_by(EngineRunRow.id.desc()).limit(limit))
            return list(s.scalars(q))

    def unfinished_runs(self) -> list[EngineRunRow]:
        """Runs of this fleet on this host that never recorded an end (an earlier life
        of the service was killed, or the host went down, while they ran)."""
        with self._session() as s:
            q = select(EngineRunRow).where(
                EngineRunRow.fleet == self.fleet, EngineRunRow.host == self.host,
                EngineRunRow.ended_at.is_(None)).order_by(EngineRunRow.id)
            return list(s.scalars(q))

    # -- incidents and transitions ---------------------------------------------------

    def add_incident(self, *, incident: Incident) -> int:
        """Record an incident; returns its id."""
        with self._session() as s:
            row = IncidentRow(
                fleet=self.fleet, host=self.host, kind=incident.kind, severity=incident.severity,
                started_at=incident.started_at, mode=incident.mode, rung=incident.rung,
                run_id=incident.run_id, action=incident.action, outcome=incident.outcome,
                explanation=incident.explanation, findings=list(incident.findings),
                log_tail=incident.log_tail, kernel_lines=list(incident.kernel_lines),
            )
            s.add(row)
            s.flush()
            return row.id

    def incidents(
        self, *, since: datetime | None = None, kind: str | None = None, limit: int = 100
    ) -> list[IncidentRow]:
        """This fleet's incidents, newest first, optionally since a time and of a kind."""
        with self._session() as s:
            q = select(IncidentRow).where(IncidentRow.fleet == self.fleet)
            if since is not None:
                q = q.where(IncidentRow.started_at >= since)
            if kind is not None:
                q = q.where(IncidentRow.kind == kind)
            return list(s.scalars(q.order_by(IncidentRow.id.desc()).limit(limit)))

    def add_transition(
        self, *, at: datetime, from_mode: str | None, to_mode: str, from_rung: int | None,
        to_rung: int, reason: str, actor: str, incident_id: int | None = None,
    ) -> int:
        """Record a mode transition; returns its id."""
        with self._session() as s:
            row = ModeTransitionRow(
                fleet=self.fleet, host=self.host, at=at, from_mode=from_mode, to_mode=to_mode,
                from_rung=from_rung, to_rung=to_rung, reason=reason, actor=actor,
                incident_id=incident_id,
            )
            s.add(row)
            s.flush()
            return row.id

    def transitions(self, *, limit: int = 100) -> list[ModeTransitionRow]:
        """This fleet's mode transitions, newest first."""
        with self._session() as s:
            q = (select(ModeTransitionRow).where(ModeTransitionRow.fleet == self.fleet)
                 .order_by(ModeTransitionRow.id.desc()).limit(limit))
            return list(s.scalars(q))

    # -- per-mode baselines ----------------------------------------------------------

    def add_baseline(
        self, *, mode: str, args_digest: str, concurrency: int, measured_at: datetime,
        tokens_per_second_per_request: float, tokens_per_second_total: float,
        ttft_seconds: float | None, acceptance_by_position: list[float] | None,
        peak_rss_bytes: int | None, mem_available_min_bytes: int | None, seconds: float,
        requests: int,
    ) -> None:
        """Record one calibration measurement of ``mode`` at ``concurrency``."""
        with self._session() as s:
            s.add(ModeBaselineRow(
                fleet=self.fleet, host=self.host, mode=mode, args_digest=args_digest,
                concurrency=concurrency, measured_at=measured_at,
                tokens_per_second_per_request=tokens_per_second_per_request,
                tokens_per_second_total=tokens_per_second_total, ttft_seconds=ttft_seconds,
                acceptance_by_position=acceptance_by_position, peak_rss_bytes=peak_rss_bytes,
                mem_available_min_bytes=mem_available_min_bytes, seconds=seconds,
                requests=requests))

    def baselines(self) -> list[ModeBaselineRow]:
        """The newest baseline of each (mode, arguments, concurrency) on this host."""
        with self._session() as s:
            q = (select(ModeBaselineRow).where(ModeBaselineRow.fleet == self.fleet,
                                               ModeBaselineRow.host == self.host)
                 .order_by(ModeBaselineRow.id))
            newest: dict[tuple[str, str, int], ModeBaselineRow] = {}
            for row in s.scalars(q):
                newest[(row.mode, row.args_digest, row.concurrency)] = row
            return list(newest.values())

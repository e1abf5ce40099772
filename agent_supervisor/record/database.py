"""The database itself: engines (SQLite WAL or PostgreSQL), migrations, and telling an
unavailable database from a wrong write.

SQLAlchemy errors are translated to ``StoreError`` here and in ``store``, once.
"""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from agent_supervisor.errors import StoreError
from agent_supervisor.resources import migrations_dir

__all__ = [
    "SQLITE_BUSY_TIMEOUT_MS", "downgrade", "is_unavailable", "make_engine",
    "safe_url", "upgrade",
]

#: The PostgreSQL advisory lock key that serialises migrations (any fixed bigint;
#: this one is the ASCII of "asupmigr").
MIGRATION_LOCK_KEY = 0x617375706D696772

#: How long SQLite waits on a lock held by another writer before failing, in ms.
SQLITE_BUSY_TIMEOUT_MS = 5000

#: libpq waits for a TCP connection forever by default: a database host that drops
#: packets (rather than refusing) would hold the record writer for minutes per attempt.
#: Ten seconds is far above a healthy connect and keeps a replay attempt short.
PG_CONNECT_TIMEOUT_SECONDS = 10


def _create_private(path: Path) -> None:
    """Create a new SQLite file 0600 in a 0700 directory, whatever the umask.

    ``supervisor run`` sets umask 077, but every other command that opens the store
    (incidents, export, calibrate, replay) runs under the caller's umask, and a database
    they created first was 0644 (incidents and engine logs readable by every user).
    SQLite gives its -wal and -shm files the main file's mode. An existing file is left
    as it is.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.fchmod(fd, 0o600)
    os.close(fd)


def make_engine(url: str, *, busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS) -> Engine:
    """A SQLAlchemy engine for ``url``; SQLite gets WAL, a busy timeout (ms) and foreign
    keys; PostgreSQL a pre-ping (a restarted server is reconnected) and a connect
    timeout unless the URL sets one.

    Creates the parent directory of a SQLite file. Raises StoreError for a bad URL.
    """
    try:
        if url.startswith("sqlite"):
            path = url.split("///", 1)[1] if "///" in url else ""
            if path and path != ":memory:":
                _create_private(Path(path))
            engine = create_engine(url, connect_args={"timeout": busy_timeout_ms / 1000})

            @event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn, _record) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.close()

            return engine
        connect_args = {}
        if url.startswith("postgresql") and "connect_timeout" not in make_url(url).query:
            connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_SECONDS
        return create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    except ModuleNotFoundError as exc:
        # The PostgreSQL driver is the [postgres] extra (pyproject.toml), not a dependency.
        raise StoreError(f"cannot open database {safe_url(url)}: its driver {exc.name!r} is not "
                         "installed: install psycopg 3 beside the supervisor "
                         "(pip install 'psycopg[binary]>=3.1,<4'; from a checkout: "
                         "pip install '.[postgres]')"
                         ) from exc
    except (SQLAlchemyError, ValueError, OSError) as exc:
        raise StoreError(f"cannot open database {safe_url(url)}: {exc}") from exc


#: PostgreSQL SQLSTATE classes that say "not now" rather than "never": connection
#: exception, transaction rollback (deadlock, serialization), insufficient resources
#: (disk full, too many connections), operator intervention (shutdown), system error.
_TRANSIENT_SQLSTATE_CLASSES = frozenset({"08", "40", "53", "57", "58"})
_READ_ONLY_SQLSTATE = "25006"


def is_unavailable(exc: BaseException) -> bool:
    """Whether a StoreError says the database could not be reached or written right now
    (server down, connection lost, "database is locked", read-only or missing file, disk
    full, a read-only standby), so the write may succeed later, rather than that this
    write can never succeed (an unknown run, a constraint). SQLite reports its I/O and
    lock failures, and PostgreSQL its connection failures, as OperationalError; other
    PostgreSQL errors are told by their SQLSTATE."""
    cause = exc.__cause__ if isinstance(exc, StoreError) else exc
    if isinstance(cause, OperationalError | InterfaceError | DisconnectionError
                  | PoolTimeoutError | OSError):
        return True
    sqlstate = getattr(getattr(cause, "orig", None), "sqlstate", None)
    return isinstance(sqlstate, str) and (
        sqlstate[:2] in _TRANSIENT_SQLSTATE_CLASSES or sqlstate == _READ_ONLY_SQLSTATE)


def safe_url(url: str) -> str:
    """The URL with any password masked, for messages and logs (issue 17: the password
    was logged at INFO)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "<unparsable database URL>"


def _alembic_config() -> Config:
    """Alembic's configuration, its scripts the package's ``data/migrations`` (the
    repository's top-level ``migrations/``, the design card's; issue 28: found through
    importlib.resources, so a wheel installed anywhere migrates).

    Raises: StoreError when the installed package lacks them.
    """
    try:
        scripts = migrations_dir()
    except FileNotFoundError as exc:
        raise StoreError(f"cannot find the migrations: {exc}") from exc
    cfg = Config()
    cfg.set_main_option("script_location", str(scripts))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Run the Alembic migrations (``_alembic_config``) up to ``revision`` on ``engine``.

    On PostgreSQL the migration holds a transaction-scoped advisory lock, so two
    processes that open the same database at once (the service and a CLI command, two
    hosts of one fleet) migrate one after the other instead of both creating the same
    tables (the second then finds the schema at ``head`` and does nothing). Alembic
    takes no such lock itself. On SQLite the same comes from ``BEGIN IMMEDIATE`` (the
    database's write lock, waited for up to the busy timeout).

    Raises: StoreError when the database refuses.
    """
    cfg = _alembic_config()
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                             {"key": MIGRATION_LOCK_KEY})
            elif conn.dialect.name == "sqlite":
                # pysqlite opens no transaction before DDL: take the write lock now
                # (waits up to the busy timeout), so the DDL runs inside it.
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    except SQLAlchemyError as exc:
        raise StoreError(f"migrating {engine.url!r} failed: {exc}") from exc
    except CommandError as exc:
        raise StoreError(f"cannot run the migrations in "
                         f"{cfg.get_main_option('script_location')}: {exc} (the package's "
                         "data/migrations: reinstall the supervisor from its wheel or "
                         "checkout)") from exc


def downgrade(engine: Engine, revision: str) -> None:
    """Run the Alembic migrations down to ``revision`` (``base`` empties the schema)."""
    cfg = _alembic_config()
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, revision)
    except SQLAlchemyError as exc:
        raise StoreError(f"downgrading {engine.url!r} failed: {exc}") from exc

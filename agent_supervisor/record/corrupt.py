"""A corrupt SQLite record moved aside, so the service starts on a fresh one (issue 34).

A ``supervisor.db`` that is not a database (``file is not a database``) or whose pages
or schema are damaged (``database disk image is malformed``, ``malformed database
schema``) used to stop ``supervisor run`` with exit 1 at start: the engine was never
started, and systemd reads exit 1 as "gave up" and does not restart. Now the caller
(``commands/run.py``, holding the state directory's lock) renames the file, with its
``-wal``, ``-shm`` and ``-journal`` companions, to ``<name>.corrupt-<UTC time>``, opens
a fresh database (migrations) and records a ``record_corrupt`` incident naming the
moved file. Nothing is deleted: an operator can still try ``sqlite3 .recover`` on it.

Only SQLite files are moved; a PostgreSQL error is never read as corruption.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

__all__ = ["CORRUPT_MESSAGES", "is_corrupt", "move_aside", "sqlite_file"]

#: What SQLite says of a file it cannot use as a database (sqlite3.DatabaseError's text;
#: SQLITE_NOTADB and SQLITE_CORRUPT). "database is locked" and "unable to open" are not
#: corruption: they are an unavailable database, kept as is.
CORRUPT_MESSAGES = ("file is not a database", "database disk image is malformed",
                    "malformed database schema")

_COMPANIONS = ("-wal", "-shm", "-journal")


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite ``url``; None for another backend, ``:memory:`` or a URL
    SQLAlchemy cannot parse."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database \
            or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def is_corrupt(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from, e.g. the ``StoreError``
    over SQLAlchemy's ``DatabaseError``) is SQLite saying the file is not a usable
    database (``CORRUPT_MESSAGES``)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, sqlite3.DatabaseError) and \
                any(m in str(cur).lower() for m in CORRUPT_MESSAGES):
            return True
        orig = getattr(cur, "orig", None)          # SQLAlchemy's DBAPIError
        if isinstance(orig, BaseException) and orig is not cur and is_corrupt(orig):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def move_aside(path: Path, *, now: datetime) -> Path:
    """Rename ``path`` (and its ``-wal``/``-shm``/``-journal`` files, if any) to
    ``<path>.corrupt-<now as %Y%m%dT%H%M%SZ>`` (a ``-<n>`` suffix if that is taken);
    returns the new path of the main file. ``now``: UTC. Raises OSError when the
    directory refuses the rename."""
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    os.replace(path, target)
    for suffix in _COMPANIONS:
        side = Path(f"{path}{suffix}")
        if side.exists():
            os.replace(side, Path(f"{target}{suffix}"))
    return target

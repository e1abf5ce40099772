"""Alembic environment for the incident store.

The service calls ``agent_supervisor.record.store.upgrade(url)``, which passes an open
connection in ``config.attributes["connection"]``. From the command line the URL comes
from ``-x url=...`` or ``$SUPERVISOR_DATABASE_URL``.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine

from agent_supervisor.record.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get(
        "SUPERVISOR_DATABASE_URL") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("no database URL: pass -x url=... or set SUPERVISOR_DATABASE_URL")
    return url


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        engine = create_engine(_url())
        with engine.connect() as conn:
            _run(conn)
        engine.dispose()

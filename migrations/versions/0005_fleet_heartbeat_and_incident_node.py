"""fleet: the rung, mode and engine state at each supervisor's heartbeat; the node an
incident names (issue 16)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("service_runs") as batch:
        batch.add_column(sa.Column("rung", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("mode", sa.String(64), nullable=True))
        batch.add_column(sa.Column("engine_state", sa.String(16), nullable=True))
    # A plain ADD COLUMN (no batch copy of ``incidents``: rows point at it).
    op.add_column("incidents", sa.Column("node", sa.String(64), nullable=True))


def _drop_column(table: str, column: str) -> None:
    """In place where SQLite can (3.35+): batch mode would copy and drop ``incidents``,
    which fails while ``mode_transitions`` rows point at it (foreign keys on; 0003)."""
    bind = op.get_bind()
    old_sqlite = bind.dialect.name == "sqlite" and bind.dialect.dbapi.sqlite_version_info < (3, 35)
    if old_sqlite:
        with op.batch_alter_table(table) as batch:
            batch.drop_column(column)
    else:
        op.drop_column(table, column)


def downgrade() -> None:
    _drop_column("incidents", "node")
    for column in ("engine_state", "mode", "rung"):
        _drop_column("service_runs", column)

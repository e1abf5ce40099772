"""engine runs: MemAvailable before the launch, SIGTERM ignored (issue 12)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("engine_runs") as batch:
        batch.add_column(sa.Column("mem_available_before_bytes", sa.BigInteger(),
                                   nullable=True))
        batch.add_column(sa.Column("sigterm_ignored", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("engine_runs") as batch:
        batch.drop_column("sigterm_ignored")
        batch.drop_column("mem_available_before_bytes")

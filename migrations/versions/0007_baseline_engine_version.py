"""mode_baselines: the engine version (or container image) a good run ran on, so a run
on a new version is compared with the last good run of the previous one (issue 29)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN: rows so far have no known version (NULL: never compared).
    op.add_column("mode_baselines", sa.Column("engine_version", sa.String(160), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("mode_baselines") as batch:
        batch.drop_column("engine_version")

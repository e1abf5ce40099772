"""mode_baselines: where a row comes from (calibration, or a past good run) and the
workload profile it was measured on (issue 13)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs: nothing points at mode_baselines, and every row so far is a
    # calibration row of the standard agent load.
    op.add_column("mode_baselines", sa.Column("source", sa.String(16), nullable=False,
                                              server_default="calibration"))
    op.add_column("mode_baselines", sa.Column("profile", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("mode_baselines") as batch:
        batch.drop_column("profile")
        batch.drop_column("source")

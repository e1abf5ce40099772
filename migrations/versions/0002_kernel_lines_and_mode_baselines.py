"""kernel lines with incidents, per-mode calibration baselines

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from agent_supervisor.record.models import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("kernel_lines", sa.JSON(), nullable=True))
    op.create_table(
        "mode_baselines",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("fleet", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("mode", sa.String(64), nullable=False),
        sa.Column("args_digest", sa.String(16), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("measured_at", UTCDateTime(), nullable=False),
        sa.Column("tokens_per_second_per_request", sa.Float(), nullable=False),
        sa.Column("tokens_per_second_total", sa.Float(), nullable=False),
        sa.Column("ttft_seconds", sa.Float(), nullable=True),
        sa.Column("acceptance_by_position", sa.JSON(), nullable=True),
        sa.Column("peak_rss_bytes", sa.BigInteger(), nullable=True),
        sa.Column("mem_available_min_bytes", sa.BigInteger(), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
    )
    op.create_index("ix_mode_baselines_mode", "mode_baselines", ["mode"])


def downgrade() -> None:
    op.drop_index("ix_mode_baselines_mode", table_name="mode_baselines")
    op.drop_table("mode_baselines")
    # In place where SQLite can (3.35+): batch mode would copy and drop `incidents`,
    # which fails while mode_transitions rows point at it (foreign keys on).
    bind = op.get_bind()
    if bind.dialect.name == "sqlite" and bind.dialect.dbapi.sqlite_version_info < (3, 35):
        with op.batch_alter_table("incidents") as batch:
            batch.drop_column("kernel_lines")
    else:
        op.drop_column("incidents", "kernel_lines")

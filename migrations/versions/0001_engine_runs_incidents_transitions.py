"""engine runs, incidents and mode transitions

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from agent_supervisor.record.models import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "engine_runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("fleet", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("mode", sa.String(64), nullable=False),
        sa.Column("rung", sa.Integer(), nullable=False),
        sa.Column("argv", sa.JSON(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("log_path", sa.Text(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("ready_at", UTCDateTime(), nullable=True),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.Column("startup_seconds", sa.Float(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_signal", sa.Integer(), nullable=True),
        sa.Column("planned_stop", sa.Boolean(), nullable=True),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )
    op.create_index("ix_engine_runs_run_id", "engine_runs", ["run_id"], unique=True)
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("fleet", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("mode", sa.String(64), nullable=True),
        sa.Column("rung", sa.Integer(), nullable=True),
        sa.Column("run_id", sa.String(40), nullable=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("explanation", sa.Text(), nullable=False),
        sa.Column("findings", sa.JSON(), nullable=False),
        sa.Column("log_tail", sa.Text(), nullable=True),
    )
    op.create_index("ix_incidents_kind", "incidents", ["kind"])
    op.create_index("ix_incidents_started_at", "incidents", ["started_at"])
    op.create_table(
        "mode_transitions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("fleet", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("from_mode", sa.String(64), nullable=True),
        sa.Column("to_mode", sa.String(64), nullable=False),
        sa.Column("from_rung", sa.Integer(), nullable=True),
        sa.Column("to_rung", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("incident_id", sa.Integer(), sa.ForeignKey("incidents.id"), nullable=True),
    )
    op.create_index("ix_mode_transitions_at", "mode_transitions", ["at"])


def downgrade() -> None:
    op.drop_index("ix_mode_transitions_at", table_name="mode_transitions")
    op.drop_table("mode_transitions")
    op.drop_index("ix_incidents_started_at", table_name="incidents")
    op.drop_index("ix_incidents_kind", table_name="incidents")
    op.drop_table("incidents")
    op.drop_index("ix_engine_runs_run_id", table_name="engine_runs")
    op.drop_table("engine_runs")

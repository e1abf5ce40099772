"""telemetry, service runs, idempotency keys of applied records; engine version, incident end

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from agent_supervisor.record.models import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_FLOATS = (
    "psi_memory_some_avg10_ratio", "psi_memory_full_avg10_ratio", "host_cpu_usage_ratio",
    "tick_lateness_seconds", "gpu_temperature_c", "gpu_power_w", "gpu_utilization_ratio",
)
_ENGINE_FLOATS = (
    "health_latency_seconds", "kv_cache_usage_ratio", "requests_running", "requests_waiting",
    "prompt_tokens_per_second", "generation_tokens_per_second", "preemptions_per_second",
    "spec_acceptance_ratio", "tokens_per_second_per_request",
)


def upgrade() -> None:
    op.create_table(
        "telemetry",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("fleet", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("resolution_seconds", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(64), nullable=True),
        sa.Column("rung", sa.Integer(), nullable=True),
        sa.Column("engine_state", sa.String(16), nullable=True),
        sa.Column("run_id", sa.String(40), nullable=True),
        sa.Column("mem_available_bytes", sa.BigInteger(), nullable=True),
        *(sa.Column(name, sa.Float(), nullable=True) for name in _FLOATS),
        sa.Column("engine_rss_bytes", sa.BigInteger(), nullable=True),
        sa.Column("engine_pss_bytes", sa.BigInteger(), nullable=True),
        *(sa.Column(name, sa.Float(), nullable=True) for name in _ENGINE_FLOATS),
    )
    op.create_index("ix_telemetry_fleet_at", "telemetry", ["fleet", "at"])
    op.create_table(
        "service_runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("service_run_id", sa.String(40), nullable=False),
        sa.Column("fleet", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("boot_id", sa.String(64), nullable=True),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=True),
        sa.Column("stopped_at", UTCDateTime(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("policy_path", sa.Text(), nullable=True),
        sa.Column("version", sa.String(32), nullable=True),
    )
    op.create_index("ix_service_runs_service_run_id", "service_runs", ["service_run_id"],
                    unique=True)
    op.create_index("ix_service_runs_fleet_host", "service_runs", ["fleet", "host"])
    op.create_table(
        "applied_records",
        sa.Column("key", sa.String(40), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("applied_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_applied_records_applied_at", "applied_records", ["applied_at"])
    with op.batch_alter_table("engine_runs") as batch:
        batch.add_column(sa.Column("engine_version", sa.Text(), nullable=True))
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("ended_at", UTCDateTime(), nullable=True))


def _drop_column(table: str, column: str) -> None:
    """Drop a column, keeping the rows that point at the table.

    On SQLite, batch mode copies the table into a new one and drops the old one; with
    foreign keys on (the store's connections) dropping ``incidents`` fails while
    ``mode_transitions`` rows point at it, and ``PRAGMA foreign_keys`` cannot change
    inside the migration's transaction. SQLite 3.35+ drops a plain column in place, so
    batch mode is only the fallback for older libraries.
    """
    bind = op.get_bind()
    old_sqlite = bind.dialect.name == "sqlite" and bind.dialect.dbapi.sqlite_version_info < (3, 35)
    if old_sqlite:
        with op.batch_alter_table(table) as batch:
            batch.drop_column(column)
    else:
        op.drop_column(table, column)


def downgrade() -> None:
    _drop_column("incidents", "ended_at")
    _drop_column("engine_runs", "engine_version")
    op.drop_index("ix_applied_records_applied_at", table_name="applied_records")
    op.drop_table("applied_records")
    op.drop_index("ix_service_runs_fleet_host", table_name="service_runs")
    op.drop_index("ix_service_runs_service_run_id", table_name="service_runs")
    op.drop_table("service_runs")
    op.drop_index("ix_telemetry_fleet_at", table_name="telemetry")
    op.drop_table("telemetry")

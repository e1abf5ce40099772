"""SQLAlchemy 2 tables of the incident store. Schema changes go through migrations/.

Times are UTC (``UTCDateTime`` gives timezone-aware datetimes back on every backend,
SQLite included). JSON columns hold evidence and argument vectors.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "AppliedRecordRow",
    "Base",
    "EngineRunRow",
    "IncidentRow",
    "ModeBaselineRow",
    "ModeTransitionRow",
    "ServiceRunRow",
    "TelemetryRow",
    "UTCDateTime",
]


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite stores it naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: store UTC-aware datetimes only")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base; type map gives every ``datetime`` column UTC semantics."""

    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime, dict[str, Any]: JSON, list[Any]: JSON,
    }


class EngineRunRow(Base):
    """One launch of the engine: its mode and argv, when it started, became ready, ended."""

    __tablename__ = "engine_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(String(40), unique=True, index=True)
    fleet: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    mode: Mapped[str] = mapped_column(String(64))
    rung: Mapped[int]
    argv: Mapped[list[Any]]
    """The argument vector, secrets masked (``agent_supervisor.privacy.mask_argv``)."""
    pid: Mapped[int | None]
    port: Mapped[int]
    log_path: Mapped[str] = mapped_column(Text)
    started_at: Mapped[datetime]
    ready_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    startup_seconds: Mapped[float | None] = mapped_column(Float)
    exit_code: Mapped[int | None]
    exit_signal: Mapped[int | None]
    planned_stop: Mapped[bool | None]
    outcome: Mapped[str | None] = mapped_column(String(32))
    """stopped | crashed | start_failed | start_timeout | spawn_failed |
    engine_core_died | orphan_killed; None while it runs."""
    error: Mapped[str | None] = mapped_column(Text)
    engine_version: Mapped[str | None] = mapped_column(Text)
    """vLLM's version (``GET /version``) when known."""
    mem_available_before_bytes: Mapped[int | None] = mapped_column(BigInteger)
    """MemAvailable just before the launch: the next start waits until memory is back
    near it (issue 12)."""
    sigterm_ignored: Mapped[bool | None]
    """The stop needed SIGKILL of the group after the SIGTERM grace."""


class IncidentRow(Base):
    """Something went wrong (or nearly): what, when, how bad, the evidence, what was done."""

    __tablename__ = "incidents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fleet: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(64), index=True)
    severity: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime] = mapped_column(index=True)
    ended_at: Mapped[datetime | None]
    """When it was over, where known (an unclean stop: from the last heartbeat to the
    next start); None for a moment-like incident."""
    mode: Mapped[str | None] = mapped_column(String(64))
    rung: Mapped[int | None]
    run_id: Mapped[str | None] = mapped_column(String(40))
    action: Mapped[str] = mapped_column(String(32))
    outcome: Mapped[str | None] = mapped_column(Text)
    explanation: Mapped[str] = mapped_column(Text)
    findings: Mapped[list[Any]]
    log_tail: Mapped[str | None] = mapped_column(Text)
    kernel_lines: Mapped[list[Any] | None]
    node: Mapped[str | None] = mapped_column(String(64))
    """The node of an engine across boxes that caused it (``engine.nodes``), if any."""


class ModeTransitionRow(Base):
    """The engine moved from one rung to another, and why."""

    __tablename__ = "mode_transitions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fleet: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime] = mapped_column(index=True)
    from_mode: Mapped[str | None] = mapped_column(String(64))
    to_mode: Mapped[str] = mapped_column(String(64))
    from_rung: Mapped[int | None]
    to_rung: Mapped[int]
    reason: Mapped[str] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(64))
    """Who moved it: ``guard:<name>``, ``schedule`` or ``operator``."""
    incident_id: Mapped[int | None] = mapped_column(ForeignKey("incidents.id"))


class ModeBaselineRow(Base):
    """What one mode delivered under the standard agent-like load at one concurrency
    (``supervisor calibrate``); the speculative-decoding guard compares against it."""

    __tablename__ = "mode_baselines"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fleet: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    mode: Mapped[str] = mapped_column(String(64), index=True)
    args_digest: Mapped[str] = mapped_column(String(16))
    """Digest of the mode's engine arguments: a changed mode needs a new baseline."""
    concurrency: Mapped[int]
    measured_at: Mapped[datetime]
    tokens_per_second_per_request: Mapped[float] = mapped_column(Float)
    tokens_per_second_total: Mapped[float] = mapped_column(Float)
    ttft_seconds: Mapped[float | None] = mapped_column(Float)
    acceptance_by_position: Mapped[list[Any] | None]
    peak_rss_bytes: Mapped[int | None] = mapped_column(BigInteger)
    mem_available_min_bytes: Mapped[int | None] = mapped_column(BigInteger)
    seconds: Mapped[float] = mapped_column(Float)
    requests: Mapped[int]
    source: Mapped[str] = mapped_column(String(16), default="calibration",
                                        server_default="calibration")
    """``calibration`` (``supervisor calibrate``) or ``run``: the acceptance of a past run
    of the mode that stayed healthy (``agent_supervisor.runtime.good_runs``)."""
    profile: Mapped[str | None] = mapped_column(String(32))
    """The workload profile (``code``, ``short_chat``, ``long_form``, ``thinking``,
    ``fleet``); None: the standard agent load the guards compare against."""
    engine_version: Mapped[str | None] = mapped_column(String(160))
    """The engine's version the row was measured on (vLLM ``/version``, llama-server
    ``/props`` ``build_info``; with a container runtime, `` image <image>`` appended);
    None: unknown (the ``engine_update`` guard compares only known versions; issue 29)."""


class TelemetryRow(Base):
    """A down-sampled stretch of Samples: gauges averaged, counters turned into rates.

    ``at`` is the start of the stretch and ``resolution_seconds`` its length (10, or 60
    after retention down-sampled the day-old rows). Every value is None when unknown.
    """

    __tablename__ = "telemetry"
    __table_args__ = (Index("ix_telemetry_fleet_at", "fleet", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fleet: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime]
    resolution_seconds: Mapped[int]
    mode: Mapped[str | None] = mapped_column(String(64))
    rung: Mapped[int | None]
    engine_state: Mapped[str | None] = mapped_column(String(16))
    run_id: Mapped[str | None] = mapped_column(String(40))
    mem_available_bytes: Mapped[int | None] = mapped_column(BigInteger)
    psi_memory_some_avg10_ratio: Mapped[float | None] = mapped_column(Float)
    psi_memory_full_avg10_ratio: Mapped[float | None] = mapped_column(Float)
    host_cpu_usage_ratio: Mapped[float | None] = mapped_column(Float)
    tick_lateness_seconds: Mapped[float | None] = mapped_column(Float)
    gpu_temperature_c: Mapped[float | None] = mapped_column(Float)
    gpu_power_w: Mapped[float | None] = mapped_column(Float)
    gpu_utilization_ratio: Mapped[float | None] = mapped_column(Float)
    engine_rss_bytes: Mapped[int | None] = mapped_column(BigInteger)
    engine_pss_bytes: Mapped[int | None] = mapped_column(BigInteger)
    health_latency_seconds: Mapped[float | None] = mapped_column(Float)
    kv_cache_usage_ratio: Mapped[float | None] = mapped_column(Float)
    requests_running: Mapped[float | None] = mapped_column(Float)
    requests_waiting: Mapped[float | None] = mapped_column(Float)
    prompt_tokens_per_second: Mapped[float | None] = mapped_column(Float)
    generation_tokens_per_second: Mapped[float | None] = mapped_column(Float)
    preemptions_per_second: Mapped[float | None] = mapped_column(Float)
    spec_acceptance_ratio: Mapped[float | None] = mapped_column(Float)
    tokens_per_second_per_request: Mapped[float | None] = mapped_column(Float)


class ServiceRunRow(Base):
    """One life of the supervisor process. ``stopped_at`` is the clean-stop marker: a row
    without it that is not the running service was killed, or its host went down."""

    __tablename__ = "service_runs"
    __table_args__ = (Index("ix_service_runs_fleet_host", "fleet", "host"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    service_run_id: Mapped[str] = mapped_column(String(40), unique=True, index=True)
    fleet: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int]
    boot_id: Mapped[str | None] = mapped_column(String(64))
    """``/proc/sys/kernel/random/boot_id`` at start: a different one later means the
    host rebooted in between."""
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime | None]
    stopped_at: Mapped[datetime | None]
    exit_code: Mapped[int | None]
    policy_path: Mapped[str | None] = mapped_column(Text)
    version: Mapped[str | None] = mapped_column(String(32))
    rung: Mapped[int | None]
    """The ladder's rung at the last heartbeat (``supervisor fleet``)."""
    mode: Mapped[str | None] = mapped_column(String(64))
    engine_state: Mapped[str | None] = mapped_column(String(16))


class AppliedRecordRow(Base):
    """Idempotency keys of the records applied (``agent_supervisor.record.records``): a spooled
    record whose key is here was written already and is skipped on replay."""

    __tablename__ = "applied_records"

    key: Mapped[str] = mapped_column(String(40), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    applied_at: Mapped[datetime] = mapped_column(index=True)

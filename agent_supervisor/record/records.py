"""Records: the writes the service hands to the store, as data that can wait on disk.

Each record is a small frozen dataclass with an idempotency ``key`` (a uuid made when
the record is made). ``Store.apply`` writes the record and its key in one transaction
and skips a record whose key is already there, so a record replayed from the spool
after a write that did succeed (the commit reached the database, the answer did not)
is not written twice.

JSON form (one line of the spool): ``{"type": <kind>, "key": ..., <fields>}``; times
are ``{"$dt": "<ISO 8601 UTC>"}`` so they come back as aware datetimes.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from pydantic import TypeAdapter, ValidationError

from agent_supervisor.act.incident import Incident, Transition

__all__ = [
    "AddBaseline",
    "AddIncident",
    "AddRun",
    "AddTelemetry",
    "AddTransition",
    "Record",
    "ServiceHeartbeat",
    "StartService",
    "StopService",
    "TelemetryPoint",
    "UpdateRun",
    "new_key",
    "record_from_json",
    "record_to_json",
]


def new_key() -> str:
    """A fresh idempotency key (uuid4, 36 characters)."""
    return str(uuid.uuid4())


@dataclass(frozen=True)
class TelemetryPoint:
    """One stretch of ``resolution_seconds`` starting at ``at`` (UTC), as stored in the
    ``telemetry`` table: gauges averaged over the stretch, rates per second, ratios 0-1,
    memory in bytes. None: unknown."""

    at: datetime
    resolution_seconds: int = 10
    mode: str | None = None
    rung: int | None = None
    engine_state: str | None = None
    run_id: str | None = None
    mem_available_bytes: int | None = None
    psi_memory_some_avg10_ratio: float | None = None
    psi_memory_full_avg10_ratio: float | None = None
    host_cpu_usage_ratio: float | None = None
    tick_lateness_seconds: float | None = None
    gpu_temperature_c: float | None = None
    gpu_power_w: float | None = None
    gpu_utilization_ratio: float | None = None
    engine_rss_bytes: int | None = None
    engine_pss_bytes: int | None = None
    health_latency_seconds: float | None = None
    kv_cache_usage_ratio: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    preemptions_per_second: float | None = None
    spec_acceptance_ratio: float | None = None
    tokens_per_second_per_request: float | None = None


@dataclass(frozen=True, kw_only=True)
class Record:
    """Base of every record: ``key`` makes applying it idempotent."""

    kind: ClassVar[str] = ""
    key: str = field(default_factory=new_key)


@dataclass(frozen=True, kw_only=True)
class AddRun(Record):
    """An engine run was launched (argv is masked before it is stored)."""

    kind: ClassVar[str] = "add_run"
    run_id: str
    mode: str
    rung: int
    argv: list[str]
    pid: int | None
    port: int
    log_path: str
    started_at: datetime
    engine_version: str | None = None
    mem_available_before_bytes: int | None = None
    """MemAvailable just before the launch (issue 12)."""


@dataclass(frozen=True, kw_only=True)
class UpdateRun(Record):
    """Set columns of an engine run: ``values`` maps engine_runs columns (ready_at,
    startup_seconds, ended_at, exit_code, exit_signal, planned_stop, outcome, error,
    engine_version, sigterm_ignored) to new values."""

    kind: ClassVar[str] = "update_run"
    run_id: str
    values: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class AddIncident(Record):
    """An incident, and the mode transition it caused (written in one transaction,
    the transition pointing at the incident)."""

    kind: ClassVar[str] = "add_incident"
    incident: Incident
    transition: Transition | None = None


@dataclass(frozen=True, kw_only=True)
class AddTransition(Record):
    """A mode transition without an incident of its own (an operator's pin, a step up)."""

    kind: ClassVar[str] = "add_transition"
    transition: Transition


@dataclass(frozen=True, kw_only=True)
class AddTelemetry(Record):
    """A batch of down-sampled telemetry rows."""

    kind: ClassVar[str] = "add_telemetry"
    points: tuple[TelemetryPoint, ...]


@dataclass(frozen=True, kw_only=True)
class AddBaseline(Record):
    """One mode_baselines row (``source`` calibration or run; ``profile`` None for the
    standard agent load)."""

    kind: ClassVar[str] = "add_baseline"
    mode: str
    args_digest: str
    concurrency: int
    measured_at: datetime
    tokens_per_second_per_request: float
    tokens_per_second_total: float
    ttft_seconds: float | None
    acceptance_by_position: list[float] | None
    peak_rss_bytes: int | None
    mem_available_min_bytes: int | None
    seconds: float
    requests: int
    source: str = "calibration"
    profile: str | None = None
    engine_version: str | None = None


@dataclass(frozen=True, kw_only=True)
class StartService(Record):
    """A life of the supervisor process began (``service_run_id`` is its uuid)."""

    kind: ClassVar[str] = "start_service"
    service_run_id: str
    pid: int
    boot_id: str | None
    started_at: datetime
    policy_path: str | None = None
    version: str | None = None


@dataclass(frozen=True, kw_only=True)
class ServiceHeartbeat(Record):
    """The supervisor was alive at ``at``, with its ladder on ``rung`` (``mode``) and the
    engine ``engine_state`` (None: not told; ``supervisor fleet`` reads them)."""

    kind: ClassVar[str] = "service_heartbeat"
    service_run_id: str
    at: datetime
    rung: int | None = None
    mode: str | None = None
    engine_state: str | None = None


@dataclass(frozen=True, kw_only=True)
class StopService(Record):
    """The clean-stop marker: the supervisor stopped on purpose at ``at``."""

    kind: ClassVar[str] = "stop_service"
    service_run_id: str
    at: datetime
    exit_code: int


_TYPES: dict[str, type[Record]] = {cls.kind: cls for cls in (
    AddRun, UpdateRun, AddIncident, AddTransition, AddTelemetry, StartService,
    ServiceHeartbeat, StopService)}
_NESTED: dict[str, type] = {"incident": Incident, "transition": Transition}


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$dt": value.isoformat()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


def _decode_hook(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and "$dt" in obj:
        value = obj["$dt"]
        if not isinstance(value, str):
            raise ValueError("$dt holds an ISO 8601 string")
        return datetime.fromisoformat(value)
    return obj


_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def _adapter(cls: type[Record]) -> TypeAdapter[Any]:
    """pydantic's validator of ``cls`` (a stdlib dataclass), built once per type."""
    if cls.kind not in _ADAPTERS:
        _ADAPTERS[cls.kind] = TypeAdapter(cls)
    return _ADAPTERS[cls.kind]


def record_to_json(record: Record) -> str:
    """One line of JSON (no newline) holding ``record``. A value JSON cannot hold is
    written as its ``str`` (a record must always reach the spool)."""
    return json.dumps({"type": record.kind, **_encode(record)}, separators=(",", ":"),
                      default=str)


def record_from_json(line: str) -> Record:
    """The record a ``record_to_json`` line holds, validated field by field (pydantic
    over the dataclasses: an ``int`` field holding ``"abc"``, a ``$dt`` that is not an
    ISO string, a nested incident that is not an object are refused here, not by the
    database).

    Raises: ValueError for text that is not such a record (bad JSON, nesting too deep,
    unknown type, missing, unknown or wrongly typed fields), naming the field; never
    another exception (issue 17: a poison line must go to the rejected file, not stop
    the spool).
    """
    try:
        data = json.loads(line, object_hook=_decode_hook)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("a record is a JSON object")
    kind = data.pop("type", None)
    cls = _TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError("unknown record type")
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"{cls.kind}: unknown fields {', '.join(map(str, unknown))[:200]}")
    try:
        return _adapter(cls).validate_python(data)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<top>'}: {e['msg']}"
                          for e in exc.errors(include_input=False)[:3])
        raise ValueError(f"{cls.kind}: {where}") from None
    except RecursionError:
        raise ValueError(f"{cls.kind}: nested too deeply") from None

"""``Sample``: one instant of telemetry, the one value type that leaves the sensors.

Every field but the time is optional: a sensor that could not read a value leaves it
``None`` ("unknown"), never 0. Units are in the names (``_seconds``, ``_bytes``,
``_ratio`` for 0-1 fractions, ``_total`` for counters that only grow until the engine
restarts).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from supervisor.states import EngineState

__all__ = ["Sample"]


@dataclass(frozen=True, slots=True)
class Sample:
    """Telemetry of one tick.

    Sources: ``engine_*`` from the launcher (it owns the process), the process tree from
    /proc through psutil, ``health_*`` from ``GET /health``, the rest from vLLM's
    ``/metrics`` (names and aliases in ``supervisor.sense.names``).
    """

    t_s: float
    """Monotonic seconds when the tick began."""
    tick_lateness_seconds: float | None = None
    """How late this tick ran against its schedule: a fact about the box (CPU
    starvation), never a verdict on the engine."""

    # The engine process, as the launcher sees it.
    engine_state: EngineState | None = None
    engine_state_since_s: float | None = None
    engine_run_id: str | None = None
    engine_rung: int | None = None
    engine_pid: int | None = None
    engine_exit_code: int | None = None
    engine_exit_signal: int | None = None
    engine_crash_reason: str | None = None

    # The process tree under the API server.
    engine_core_alive: bool | None = None
    """Whether a ``VLLM::EngineCore`` process is under the API server. ``None`` when the
    engine runs without one (in-process engine) or the tree could not be read."""
    engine_processes: int | None = None
    engine_rss_bytes: int | None = None

    # Probes.
    health_status: int | None = None
    """HTTP status of ``GET /health``; None when it did not answer in time."""
    health_latency_seconds: float | None = None

    # vLLM /metrics (gauges as read; counters as cumulative totals since engine start).
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage_ratio: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    iteration_tokens_count_total: float | None = None
    """Engine steps so far (``vllm:iteration_tokens_total_count``): the heartbeat."""
    preemptions_total: float | None = None
    spec_decode_num_drafts_total: float | None = None
    spec_decode_num_draft_tokens_total: float | None = None
    spec_decode_num_accepted_tokens_total: float | None = None
    metrics_error: str | None = None
    """Why ``/metrics`` could not be read this tick, if it could not."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping of every field (``None`` kept, state as its string)."""
        out = dataclasses.asdict(self)
        if self.engine_state is not None:
            out["engine_state"] = str(self.engine_state)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        """Inverse of ``to_dict``. Unknown keys raise ``TypeError``."""
        values = dict(data)
        if values.get("engine_state") is not None:
            values["engine_state"] = EngineState(values["engine_state"])
        return cls(**values)

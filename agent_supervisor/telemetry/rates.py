"""Rates derived from a Window: throughput, preemptions, heartbeat, speculative decoding.

Definitions (DESIGN.md, "Facts"): acceptance rate = d(accepted) / d(draft tokens); mean
acceptance length = 1 + d(accepted) / d(drafts); per-position acceptance = d(accepted at
position i) / d(drafts). Compare acceptance per position, never across different k.
Pure; every value is None when its counters are unknown or did not move.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from agent_supervisor.telemetry.counters import counter_step
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

__all__ = ["EngineRates", "engine_rates", "rate_series", "since_last", "slope"]


@dataclass(frozen=True, slots=True)
class EngineRates:
    """Rates over the last ``seconds`` of a window (per second unless named a ratio)."""

    seconds: float
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    preemptions_per_second: float | None = None
    engine_steps_per_second: float | None = None
    """The heartbeat: engine iterations per second (``vllm:iteration_tokens_total_count``)."""
    spec_acceptance_ratio: float | None = None
    spec_mean_acceptance_length: float | None = None
    spec_acceptance_by_position: tuple[float, ...] | None = None
    spec_drafts: float | None = None
    """How many drafts the ratios rest on (a ratio over 3 drafts says little)."""
    tokens_per_second_per_request: float | None = None
    """Decode speed of one request: 1 / mean time per output token of the requests that
    finished in the period (``vllm:request_time_per_output_token_seconds``)."""
    requests_finished: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def engine_rates(window: Window, seconds: float, now_s: float) -> EngineRates:
    """Rates over samples taken in ``[now_s - seconds, now_s]`` (later ones ignored)."""
    since = now_s - seconds

    def rate(field: str) -> float | None:
        return window.rate(field, seconds, now_s)

    def inc(field: str) -> float | None:
        got = window.increase(field, since, now_s)
        return None if got is None else got[0]

    drafts = inc("spec_decode_num_drafts_total")
    draft_tokens = inc("spec_decode_num_draft_tokens_total")
    accepted = inc("spec_decode_num_accepted_tokens_total")
    by_pos = window.increase_by_position("spec_decode_accepted_per_position_total", since,
                                         now_s)
    has_drafts = drafts is not None and drafts > 0
    tpot_sum, tpot_n = inc("request_tpot_sum_seconds_total"), inc("request_tpot_count_total")
    per_request = tpot_n / tpot_sum if tpot_n and tpot_sum else None
    return EngineRates(
        seconds=seconds,
        prompt_tokens_per_second=rate("prompt_tokens_total"),
        generation_tokens_per_second=rate("generation_tokens_total"),
        preemptions_per_second=rate("preemptions_total"),
        engine_steps_per_second=rate("iteration_tokens_count_total"),
        spec_acceptance_ratio=(accepted / draft_tokens
                               if accepted is not None and draft_tokens else None),
        spec_mean_acceptance_length=(1 + accepted / drafts if accepted is not None
                                     and drafts is not None and has_drafts else None),
        spec_acceptance_by_position=(tuple(a / drafts for a in by_pos) if by_pos is not None
                                     and drafts is not None and has_drafts else None),
        spec_drafts=drafts,
        tokens_per_second_per_request=per_request,
        requests_finished=tpot_n,
    )


def rate_series(samples: list[Sample], field: str, step_s: float) -> list[float | None]:
    """Per-sample rate of the counter ``field`` (units per second) over the ``step_s``
    seconds before each sample, in one pass (two pointers over cumulative growth; a drop
    or a new run is a counter reset, ``counter_step``); None where unknown. ``samples``
    oldest first. The dashboard's rate charts (show/api/telemetry.py)."""
    growth = [0.0] * len(samples)
    known = [False] * len(samples)
    prev = None
    for i, x in enumerate(samples):
        v = getattr(x, field)
        if v is not None:
            known[i] = True
            if prev is not None:
                growth[i] = counter_step(*prev, v, x.engine_run_id)
            prev = (v, x.engine_run_id)
    cum: list[float] = []
    total = 0.0
    for g in growth:
        total += g
        cum.append(total)
    out: list[float | None] = []
    j = 0
    for i, x in enumerate(samples):
        while samples[j].t_s < x.t_s - step_s:
            j += 1
        span = x.t_s - samples[j].t_s
        out.append((cum[i] - cum[j]) / span if known[i] and known[j] and span > 0 else None)
    return out


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (t, y) points (y units per second); 0.0 when every t is the
    same. Raises ZeroDivisionError on an empty list."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 0.0 if var == 0 else sum((t - mt) * (y - my) for t, y in points) / var


def since_last(window: Window, field: str, amount: float) -> float | None:
    """Start (t_s) of the shortest trailing span of ``window`` over which the counter
    ``field`` grew by at least ``amount``, or None when it never grew that much.

    Rates "over the last N drafts" rest on it: a fixed time slice dilutes a jump when
    drafts are few (4 drafts in 10 s at low load in vllm #40756's log), N drafts do not.
    Only the newest engine run counts (a new run resets the counters).
    """
    latest = window.latest
    if latest is None:
        return None
    grown, prev = 0.0, None
    for s in reversed(list(window)):
        if s.engine_run_id != latest.engine_run_id:
            break
        value = getattr(s, field)
        if value is None:
            continue
        if prev is not None:
            grown += max(prev - value, 0.0)
            if grown >= amount:
                return s.t_s
        prev = value
    return None

"""The day benchmark's figures: per arm, from what the agents saw and when engines served.

Tasks and requests come from the fleet's records (a task fails when any of its requests
fails); tokens delivered are the ``usage`` completion tokens of successful requests;
"no engine serving" is the day's time not covered by a ready engine (first /health 200
to exit), a hung engine counting as not serving from its SIGSTOP; TTFT is over
successful requests. Ratios are supervised over each other arm, measured in the same run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agent_supervisor.chaos.day_schedule import Day
from agent_supervisor.load.agents import RequestRecord
from agent_supervisor.load.fleet import TaskRecord

__all__ = ["ArmResult", "acceptance", "arm_figures", "format_table"]

ARMS = ("always-fast", "always-safe", "supervised")


@dataclass
class ArmResult:
    """What one arm's day left: records, spans and the injector's events."""

    name: str
    t0: float                         # epoch s: the day's start (first engine ready)
    mono_offset: float                # epoch - monotonic at t0
    records: list[RequestRecord]
    tasks: list[TaskRecord]
    intervals: list[tuple[float, float]]
    hangs: list[dict[str, Any]]
    events: list[dict[str, Any]]
    summary: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _measure(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of ``spans``."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _clip(spans: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(a, lo), min(b, hi)) for a, b in spans if min(b, hi) > max(a, lo)]


def serving_spans(res: ArmResult, end: float) -> list[tuple[float, float]]:
    """Ready-engine spans minus each hung engine's time from its SIGSTOP to its end."""
    out = []
    for a, b in res.intervals:
        cut = min((h["start"] for h in res.hangs if a <= h["start"] < b), default=None)
        if cut is not None:
            b = cut
        if b > a:
            out.append((a, min(b, end)))
    return out


def arm_figures(res: ArmResult, day: Day) -> dict[str, Any]:
    """The arm's figures (see the module docstring)."""
    end = res.t0 + day.seconds
    ok = [r for r in res.records if r.ok]
    tokens = sum(r.completion_tokens for r in ok)
    free = [(res.t0 + a, res.t0 + b) for a, b in day.fault_free()]
    free_s = sum(b - a for a, b in free)

    def ended(r: RequestRecord) -> float:
        return r.started_s + r.duration_seconds + res.mono_offset

    free_tokens = sum(r.completion_tokens for r in ok
                      if any(a <= ended(r) < b for a, b in free))
    serving = _measure(_clip(serving_spans(res, end), res.t0, end))
    ttfts = [r.ttft_seconds for r in ok if r.ttft_seconds is not None]
    errors = Counter((r.error or "")[:70] for r in res.records if not r.ok)
    return {
        "tasks_completed": sum(t.ok for t in res.tasks),
        "tasks_failed": sum(not t.ok for t in res.tasks),
        "requests": len(res.records),
        "requests_failed": len(res.records) - len(ok),
        "tokens_delivered": tokens,
        "tokens_per_second": round(tokens / day.seconds, 1),
        "fault_free_seconds": round(free_s, 1),
        "fault_free_tokens_per_second": round(free_tokens / free_s, 1) if free_s else None,
        "no_engine_serving_seconds": round(day.seconds - serving, 1),
        "ttft_p50_seconds": _round(_pct(ttfts, 0.5)),
        "ttft_p99_seconds": _round(_pct(ttfts, 0.99)),
        "top_errors": errors.most_common(3),
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


#: The table's rows: (label, figure key, format).
ROWS = (("tasks completed", "tasks_completed", "{:d}"),
        ("tasks failed", "tasks_failed", "{:d}"),
        ("requests failed", "requests_failed", "{:d}"),
        ("requests", "requests", "{:d}"),
        ("tokens delivered", "tokens_delivered", "{:d}"),
        ("tokens/s, fault-free stretches", "fault_free_tokens_per_second", "{:.1f}"),
        ("no engine serving, s", "no_engine_serving_seconds", "{:.1f}"),
        ("TTFT p50, s", "ttft_p50_seconds", "{:.3f}"),
        ("TTFT p99, s", "ttft_p99_seconds", "{:.3f}"))


def _cell(fmt: str, v: Any) -> str:
    return "-" if v is None else fmt.format(v)


def _ratio(a: Any, b: Any) -> str:
    if a is None or b is None:
        return "-"
    if b == 0:
        return "-" if a == 0 else "inf"
    return f"{a / b:.2f}"


def format_table(figs: dict[str, dict[str, Any]]) -> str:
    """One row per figure, a column per arm, then supervised / each other arm."""
    head = (f"{'':32s} {'always-fast':>12s} {'always-safe':>12s} {'supervised':>12s} "
            f"{'sup/fast':>9s} {'sup/safe':>9s}")
    out = [head, "-" * len(head)]
    for label, key, fmt in ROWS:
        f, s, v = (figs[a].get(key) for a in ARMS)
        out.append(f"{label:32s} {_cell(fmt, f):>12s} {_cell(fmt, s):>12s} "
                   f"{_cell(fmt, v):>12s} {_ratio(v, f):>9s} {_ratio(v, s):>9s}")
    return "\n".join(out)


def acceptance(figs: dict[str, dict[str, Any]]) -> dict[str, bool | None]:
    """Issue 20's targets, each True/False (None when a figure is missing)."""
    fast, safe, sup = (figs[a] for a in ARMS)
    ff_fast, ff_sup = fast["fault_free_tokens_per_second"], sup["fault_free_tokens_per_second"]
    return {
        "more_tasks_than_both": sup["tasks_completed"] > max(fast["tasks_completed"],
                                                            safe["tasks_completed"]),
        "no_failed_task": sup["tasks_failed"] == 0,
        "fault_free_tokens_ge_0.9_fast": (None if not ff_fast or ff_sup is None
                                          else ff_sup >= 0.9 * ff_fast),
        "tokens_above_safe": sup["tokens_delivered"] > safe["tokens_delivered"],
    }

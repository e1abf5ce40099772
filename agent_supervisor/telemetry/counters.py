"""Counter growth between two readings, resets included: the one place that says what a
counter reset is (``Window.increase``, ``Window.increase_by_position`` and the admin
API's rate series all step through it).

A reset is Prometheus' ``increase()`` rule plus one of ours: a value below the previous
one, or a reading from another engine run (a restarted vLLM starts its counters at 0),
means the counter restarted from 0, so the new value itself is the growth since then.
Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["counter_step", "position_step"]


def counter_step(prev: float, prev_run: str | None, value: float, run: str | None) -> float:
    """Growth of one counter from ``prev`` (read in run ``prev_run``) to ``value``."""
    reset = value < prev or run != prev_run
    return value if reset else value - prev


def position_step(prev: Sequence[float], prev_run: str | None, value: Sequence[float],
                  run: str | None) -> list[float] | None:
    """``counter_step`` for a tuple-valued counter (one counter per draft position).

    A reset in any position or a new run counts as a reset of all. None when the number
    of positions changed (the two readings cannot be compared).
    """
    if len(value) != len(prev):
        return None
    reset = run != prev_run or any(a < b for a, b in zip(value, prev, strict=True))
    return list(value) if reset else [a - b for a, b in zip(value, prev, strict=True)]


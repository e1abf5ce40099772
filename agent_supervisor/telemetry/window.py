"""``Window``: the recent Samples, oldest first, bounded by age and count.

It turns counters into increases and rates (an engine restart resets vLLM's counters:
handled), and answers "how long has this held". Pure: no clock reads, time passed in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from agent_supervisor.telemetry.counters import counter_step, position_step
from agent_supervisor.telemetry.sample import Sample

if TYPE_CHECKING:
    from agent_supervisor.policy.holder import PolicyHolder
    from agent_supervisor.policy.model import Policy

__all__ = ["Window"]


class Window:
    """A bounded, time-ordered run of Samples.

    Keeps samples no older than ``max_age_seconds`` behind the newest, and at most
    ``max_samples`` of them (so memory stays bounded whatever the tick rate).
    """

    def __init__(self, max_age_seconds: float = 600.0, max_samples: int = 4096) -> None:
        self.max_age_seconds = max_age_seconds
        self._samples: deque[Sample] = deque(maxlen=max_samples)

    def follow(self, holder: PolicyHolder) -> None:
        """Keep ``max_age_seconds`` at the policy's ``sampling.window_seconds`` across
        reloads (the holder's swaps; issue 30: the window follows, no one pokes it)."""
        def swapped(old: Policy, new: Policy) -> None:
            self.max_age_seconds = new.sampling.window_seconds
        holder.on_swap(swapped)

    def append(self, sample: Sample) -> None:
        """Add the newest sample and drop those older than the window."""
        self._samples.append(sample)
        horizon = sample.t_s - self.max_age_seconds
        while self._samples and self._samples[0].t_s < horizon:
            self._samples.popleft()

    @property
    def latest(self) -> Sample | None:
        """The newest sample, or None when empty."""
        return self._samples[-1] if self._samples else None

    def __len__(self) -> int:
        return len(self._samples)

    def __iter__(self) -> Iterator[Sample]:
        return iter(self._samples)

    @classmethod
    def of(cls, samples: list[Sample], max_age_seconds: float = 600.0) -> Window:
        """A window holding ``samples`` (for tests and replay)."""
        window = cls(max_age_seconds)
        for sample in samples:
            window.append(sample)
        return window

    def between(self, start_s: float, end_s: float) -> Window:
        """A window of the samples taken in ``[start_s, end_s]``."""
        return Window.of([s for s in self._samples if start_s <= s.t_s <= end_s],
                         self.max_age_seconds)

    def since(self, t_s: float) -> list[Sample]:
        """Samples taken at or after monotonic time ``t_s``, oldest first."""
        return [s for s in self._samples if s.t_s >= t_s]

    def increase(self, field: str, since_s: float,
                 until_s: float | None = None) -> tuple[float, float] | None:
        """How much the counter ``field`` grew from ``since_s`` to the newest sample (or
        the last one taken at or before ``until_s``).

        Returns: (increase, seconds between the first and last known values), or None
        with fewer than two known values. Resets are handled as Prometheus' increase()
        does: a value below the previous one, or a new engine run, means the counter
        restarted from 0, so the new value itself is the growth since the reset.
        Unknown (None) values are skipped, never read as 0.
        """
        total, first_t, prev = 0.0, None, None
        for s in self.since(since_s):
            if until_s is not None and s.t_s > until_s:
                break
            value = getattr(s, field)
            if value is None:
                continue
            if prev is not None:
                _, prev_v, prev_run = prev
                total += counter_step(prev_v, prev_run, value, s.engine_run_id)
            else:
                first_t = s.t_s
            prev = (s.t_s, value, s.engine_run_id)
        if prev is None or first_t is None or prev[0] == first_t:
            return None
        return total, prev[0] - first_t

    def rate(self, field: str, seconds: float, now_s: float) -> float | None:
        """Per-second rate of the counter ``field`` over the last ``seconds``, or None."""
        inc = self.increase(field, now_s - seconds, now_s)
        if inc is None:
            return None
        growth, span = inc
        return growth / span

    def increase_by_position(self, field: str, since_s: float,
                             until_s: float | None = None) -> tuple[float, ...] | None:
        """``increase`` for a tuple-valued counter (one counter per draft position).

        None with fewer than two known values or when the number of positions changes.
        """
        total: list[float] | None = None
        prev: tuple[tuple[float, ...], str | None] | None = None
        for s in self.since(since_s):
            if until_s is not None and s.t_s > until_s:
                break
            value = getattr(s, field)
            if value is None:
                continue
            if prev is not None:
                step = position_step(*prev, value, s.engine_run_id)
                if step is None:
                    return None
                total = [t + d for t, d in zip(total or [0.0] * len(value), step, strict=True)]
            prev = (value, s.engine_run_id)
        return None if total is None else tuple(total)

    def held_for(self, predicate: Callable[[Sample], bool], now_s: float) -> float:
        """Seconds the newest consecutive samples have all satisfied ``predicate``.

        Measured from the oldest sample of that streak to ``now_s``; 0.0 when the newest
        sample fails it (or the window is empty).
        """
        start = None
        for s in reversed(self._samples):
            if not predicate(s):
                break
            start = s.t_s
        return 0.0 if start is None else now_s - start

    def unchanged_for(self, fields: tuple[str, ...], now_s: float) -> float | None:
        """Seconds since any of ``fields`` last changed within the current engine run.

        None when the newest sample lacks one of the fields (unknown, not flat).
        """
        latest = self.latest
        if latest is None or any(getattr(latest, f) is None for f in fields):
            return None
        key = tuple(getattr(latest, f) for f in fields)
        since = latest.t_s
        for s in reversed(self._samples):
            if s.engine_run_id != latest.engine_run_id:
                break
            if tuple(getattr(s, f) for f in fields) != key:
                break
            since = s.t_s
        return now_s - since

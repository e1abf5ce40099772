"""``Window``: the recent Samples, oldest first, bounded by age and count."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from supervisor.sense.sample import Sample

__all__ = ["Window"]


class Window:
    """A bounded, time-ordered run of Samples.

    Keeps samples no older than ``max_age_seconds`` behind the newest, and at most
    ``max_samples`` of them (so memory stays bounded whatever the tick rate).
    """

    def __init__(self, max_age_seconds: float = 600.0, max_samples: int = 4096) -> None:
        self.max_age_seconds = max_age_seconds
        self._samples: deque[Sample] = deque(maxlen=max_samples)

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

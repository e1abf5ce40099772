"""``Baselines``: calibrated throughput per mode, as ``decide()`` reads it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["Baselines"]

#: Calibrated throughput per mode: mode name -> [(concurrency, tokens/s per request)].
Baselines = Mapping[str, Sequence[tuple[float, float]]]

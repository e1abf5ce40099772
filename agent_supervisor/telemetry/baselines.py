"""``Baselines``: calibrated throughput per mode, as ``decide()`` reads it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["AcceptanceBaselines", "Baselines"]

#: Calibrated throughput per mode: mode name -> [(concurrency, tokens/s per request)].
Baselines = Mapping[str, Sequence[tuple[float, float]]]

#: Usual acceptance by draft position per mode (calibration, past good runs): mode name ->
#: (position 0, position 1, ...), each d(accepted at i) / d(drafts). Only one k per mode,
#: so positions compare like with like.
AcceptanceBaselines = Mapping[str, Sequence[float]]

"""``json_finite``: a JSON-like value with every NaN and infinity made None (unknown).

A sensor may read NaN or an infinity (a Prometheus series can expose ``NaN`` or
``+Inf``), and a guard can compute one (a rate over no time). JSON has neither:
PostgreSQL refused incidents whose evidence carried them, so they went to the rejected
spool instead of the record (issue 34), and strict JSON readers of the webhook and the
API refuse them too. ``Finding.to_dict`` and the record's writes pass evidence through
here, so "not a number" is stored as what it means: unknown.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["json_finite"]


def json_finite(value: Any) -> Any:
    """``value`` (dicts, lists and tuples walked; tuples become lists) with every float
    that is NaN or infinite replaced by None. Other values are returned as they are."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_finite(v) for v in value]
    return value

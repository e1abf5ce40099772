"""``stall_of``: the one "stalled" rule (issue 30), shared by the canary that confirms a
hang (agent_supervisor/sense/collect.py) and the hung guard that judges it
(agent_supervisor/decide/guards/engine_hung.py).

A run is stalled while requests are present (``load_of``) and its progress counters
(``PROGRESS``: vLLM's engine-step heartbeat ``vllm:iteration_tokens_total_count`` and both
token counters; llama-server's equivalents, sense/profiles.py) stay flat. vLLM's /health
answers 200 while the engine is hung (vllm PR #24897, issue #39863), so progress is the
evidence. A sample whose loop probe went unanswered (``engine_loop_answered`` False:
llama-server stops answering /metrics when its loop stops, llama.cpp #27388) counts as
no progress: its counters are carried from the last answer. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent_supervisor.telemetry.load import load_of
from agent_supervisor.telemetry.sample import Sample

__all__ = ["PROGRESS", "Stall", "stall_of"]

PROGRESS = ("iteration_tokens_count_total", "prompt_tokens_total", "generation_tokens_total")


@dataclass(frozen=True)
class Stall:
    """The current stall of one run: ``since_s`` (monotonic seconds: the later of the
    last progress and the start of the loaded spell), ``flat_seconds`` (from ``since_s``
    to the newest known sample), ``last`` (that sample) and ``known`` (the run's samples
    with known progress and load, oldest first)."""

    since_s: float
    flat_seconds: float
    last: Sample
    known: tuple[Sample, ...]


def _progress(known: list[Sample]) -> list[tuple[float | None, ...]]:
    """The progress counters of each sample, the last answered ones carried through the
    samples whose loop did not answer (their counters are unknown, not moving)."""
    out: list[tuple[float | None, ...]] = []
    for x in known:
        now = tuple(getattr(x, f) for f in PROGRESS)
        out.append(out[-1] if out and x.engine_loop_answered is False and None in now else now)
    return out


def stall_of(run_samples: Iterable[Sample], now_s: float,
             fresh_seconds: float) -> Stall | None:
    """The stall of ``run_samples`` (one engine run, oldest first) at ``now_s``, or None:
    no sample with known progress and load, or the newest is older than
    ``fresh_seconds`` (time without readings is unknown, not flat). ``flat_seconds`` is
    0 while the newest sample made progress or carried no load."""
    known = [x for x in run_samples
             if (all(getattr(x, f) is not None for f in PROGRESS)
                 or x.engine_loop_answered is False) and load_of(x) is not None]
    if not known:
        return None
    last = known[-1]
    if now_s - last.t_s > fresh_seconds:
        return None
    flat_since = last.t_s
    progress = _progress(known)
    for x, seen in zip(reversed(known), reversed(progress), strict=True):
        if seen != progress[-1]:
            break
        flat_since = x.t_s
    # An idle spell before the stall is fine (counters are flat then too); only the last
    # stall window must be loaded throughout.
    loaded_since = last.t_s
    for x in reversed(known):
        if not load_of(x):
            break
        loaded_since = x.t_s
    since = max(flat_since, loaded_since)
    return Stall(since, last.t_s - since, last, tuple(known))

"""The day benchmark's schedule and ladder: what happens when, and the modes it runs.

A ``Day`` is the load (agent sessions, turns per task) and the faults at fixed offsets
from the start of the day, the same for every arm. The seed moves each offset by a few
seconds (the same seed gives the same schedule) and seeds the agents' choices.

Fault windows: each fault has ``clear_seconds``, how long after it the day is not a
fault-free stretch (the fault itself plus an engine start-up, about 25-40 s here); the
fault-free stretches are the rest of the day before the first persistent fault. They are
where tokens delivered compare the top rung with the supervisor's cost when nothing
goes wrong.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DAY_LADDER", "Day", "Fault", "full_day", "short_day"]

#: The demo ladder: n-gram speculation (prompt lookup, k=5) on the tiny Llama is the top
#: rung, faster than plain decoding on the CPU engine (shared/CPU_ENGINE.md: about 1,900
#: vs 1,000 tokens/s for one request; re-measured under the day's load by the day
#: benchmark's first figures), then plain decoding, then the safe rung (two sequences).
DAY_LADDER: list[dict[str, Any]] = [
    {"name": "fast", "description": "n-gram speculation k=5, 8 sequences",
     "args": {"--speculative-config": {"method": "ngram", "num_speculative_tokens": 5,
                                       "prompt_lookup_max": 4, "prompt_lookup_min": 2},
              "--max-num-seqs": 8},
     "gateway": {"max_concurrency": 8, "max_queue": 256}},
    {"name": "nospec", "description": "no speculation, 8 sequences",
     "args": {"--max-num-seqs": 8},
     "gateway": {"max_concurrency": 8, "max_queue": 256}},
    {"name": "safe", "description": "no speculation, 2 sequences",
     "args": {"--max-num-seqs": 2},
     "gateway": {"max_concurrency": 2, "max_queue": 256}},
]


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: ``kind`` at ``at_seconds`` after the day starts.

    Kinds: ``crash`` (SIGKILL of VLLM::EngineCore), ``hang`` (SIGSTOP of it; a plain
    restart loop never notices, so the operator SIGKILLs a core still stopped after
    ``hang_operator_seconds``), ``long_prompts`` (a burst of agents sending long file
    excerpts for ``seconds``), ``memory`` (a balloon down to the memory floor, held
    ``seconds``), ``spec_crash`` (from then on every engine with speculation crashes on
    its first request: ``spec_crash_engine.py``). ``clear_seconds`` None: to the end.
    """

    kind: str
    at_seconds: float
    clear_seconds: float | None
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Day:
    """The load and the schedule every arm runs (seconds from the start of the day)."""

    name: str
    seed: int
    seconds: float
    faults: tuple[Fault, ...]
    sessions: int = 6
    task_turns: int = 4
    max_tokens: int = 64
    burst_sessions: int = 6
    hang_operator_seconds: float = 60.0
    calm_seconds: float = 30.0
    request_timeout_seconds: float = 180.0
    task_backoff_seconds: float = 10.0
    """After a failed task an agent waits this long before its next one (the
    orchestrator re-queues the work); agents do not retry a failed request."""
    extra: dict[str, Any] = field(default_factory=dict)

    def fault_free(self) -> list[tuple[float, float]]:
        """The fault-free stretches, ``[(start, end), ...]`` in seconds of the day."""
        out, t = [], 0.0
        for f in sorted(self.faults, key=lambda f: f.at_seconds):
            if f.at_seconds > t:
                out.append((t, f.at_seconds))
            if f.clear_seconds is None:
                return out
            t = max(t, f.at_seconds + f.clear_seconds)
        if t < self.seconds:
            out.append((t, self.seconds))
        return out

    def describe(self) -> list[str]:
        """One line per fault, for the report."""
        return [f"{f.at_seconds:6.0f} s  {f.kind}"
                + (f" ({f.seconds:g} s)" if f.seconds else "")
                + ("" if f.clear_seconds is not None else "  (persists to the end)")
                for f in self.faults]


def _jitter(rng: random.Random, at: float) -> float:
    return round(at + rng.uniform(-3.0, 3.0), 1)


def full_day(seed: int = 1) -> Day:
    """The headline day: 510 s per arm, five faults in the issue's order, then a calm
    tail (about 30 min for the three arms with their start-ups on a shared 2-core box).

    0-70 s fault-free; an EngineCore crash; a hang (the operator's kill after 60 s in
    the plain arms); memory pressure to the floor (held 20 s); a burst of long prompts
    (40 s); from 450 s the speculative crash (persists); the rest a calm tail where the
    ladder may step back up. Clear windows allow 90 s for an engine start-up (25-40 s on
    a quiet box, 75-85 s seen on this one with four other sessions at work).
    """
    rng = random.Random(seed)
    op = 60.0
    faults = (Fault("crash", _jitter(rng, 70), 90),
              Fault("hang", _jitter(rng, 160), op + 90),
              Fault("memory", _jitter(rng, 310), 90, seconds=20),
              Fault("long_prompts", _jitter(rng, 400), 50, seconds=40),
              Fault("spec_crash", _jitter(rng, 450), None))
    return Day("full", seed, 510.0, faults, hang_operator_seconds=op)


def short_day(seed: int = 1) -> Day:
    """The CI smoke of the harness: 40 s per arm and one fault, the speculative crash
    about 10 s in (about 3 minutes for the three arms on a quiet box).

    The crash meets the engine each arm started with, so its outcome does not hang on
    how long a restart takes on a loaded box: the CI run of 2026-12-02 had the crash
    first (10 s) and the speculative crash at 30 s; the supervised arm's restarted
    engine took 50 s to serve, met the speculative crash after the arm had ended, and
    the step to ``nospec`` the smoke checks never came. The plain loop's crash and
    restart are exercised all the same: the speculative crash SIGKILLs the EngineCore.
    """
    rng = random.Random(seed)
    faults = (Fault("spec_crash", _jitter(rng, 10), None),)
    return Day("short", seed, 40.0, faults, sessions=4, task_turns=3)


def base_dir(path: Path | None) -> Path:
    """The run's directory (a fresh one under the temp directory by default)."""
    import tempfile

    if path is None:
        return Path(tempfile.mkdtemp(prefix="supervisor-day-"))
    path.mkdir(parents=True, exist_ok=True)
    return path

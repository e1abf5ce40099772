"""Traces: what the live service saw and decided, as JSON Lines, for ``supervisor replay``.

One JSON object per line, with a ``type``:

- ``header``: ``version``, ``fleet``, ``t0_s`` (monotonic start of the ladder), ``rung``
  and ``last_trouble_s`` (the ladder after adoption or a host reset), ``started_at`` (UTC
  ISO), ``baselines`` (mode -> [[concurrency, tokens/s per request]]);
- ``sample``: every field of a Sample (see ``supervisor.telemetry.sample``);
- ``decision``: the decision taken right after the sample before it (``Decision.to_dict``
  plus ``t_s``);
- ``skip``: no decision after the sample before it (an action was still being carried out);
- ``operator``: ``t_s``, ``action`` (pin, unpin, step, pause, resume, or ``reload`` with
  ``reload_pending``) and ``rung``, applied to the ladder before the next sample.

A trace of samples alone (``supervisor sample --watch > trace.jsonl``) replays too: a
decision is then taken after every sample.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from supervisor.decide.decision import Decision
from supervisor.telemetry.baselines import Baselines
from supervisor.telemetry.sample import Sample

__all__ = ["TRACE_VERSION", "TraceWriter", "read_trace"]

TRACE_VERSION = 1


class TraceWriter:
    """Appends trace records to a file, one flushed line each."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f: IO[str] | None = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def _write(self, record: dict[str, Any]) -> None:
        if self._f is not None:
            self._f.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
            self._f.flush()

    def header(self, *, fleet: str, t0_s: float, baselines: Baselines, rung: int = 0,
               last_trouble_s: float | None = None) -> None:
        """The first record: who recorded it and what it knew at the start (the ladder's
        rung after adoption or a host reset, and its last trouble)."""
        self._write({"type": "header", "version": TRACE_VERSION, "fleet": fleet, "t0_s": t0_s,
                     "started_at": datetime.now(UTC).isoformat(), "rung": rung,
                     "last_trouble_s": last_trouble_s,
                     "baselines": {m: [list(b) for b in v] for m, v in baselines.items()}})

    def sample(self, sample: Sample) -> None:
        """One tick's Sample."""
        self._write({"type": "sample", **sample.to_dict()})

    def decision(self, t_s: float, decision: Decision) -> None:
        """The decision taken on the sample just written."""
        self._write({"type": "decision", "t_s": t_s, **decision.to_dict()})

    def skip(self, t_s: float) -> None:
        """No decision on the sample just written (an action was in progress)."""
        self._write({"type": "skip", "t_s": t_s})

    def operator(self, t_s: float, action: str, rung: int | None = None,
                 **extra: object) -> None:
        """An operator lever pulled between two ticks (or a policy ``reload``)."""
        self._write({"type": "operator", "t_s": t_s, "action": action, "rung": rung, **extra})

    def close(self) -> None:
        """Close the file (later writes are dropped)."""
        if self._f is not None:
            self._f.close()
            self._f = None


def read_trace(path: Path) -> list[dict[str, Any]]:
    """All records of a trace file. A line without ``type`` is taken as a sample
    (``supervisor sample --watch`` output). Raises ValueError naming the bad line."""
    records = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not JSON: {exc}") from exc
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{n}: not a JSON object")
            rec.setdefault("type", "sample")
            records.append(rec)
    return records

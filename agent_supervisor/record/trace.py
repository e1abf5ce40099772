"""Traces: what the live service saw and decided, as JSON Lines, for ``supervisor replay``.

One JSON object per line, with a ``type``:

- ``header``: ``version``, ``fleet``, ``t0_s`` (monotonic start of the ladder), ``rung``
  and ``last_trouble_s`` (the ladder after adoption or a host reset), ``started_at`` (UTC
  ISO), ``baselines`` (mode -> [[concurrency, tokens/s per request]]);
- ``sample``: every field of a Sample (see ``agent_supervisor.telemetry.sample``);
- ``decision``: the decision taken right after the sample before it (``Decision.to_dict``
  plus ``t_s``);
- ``skip``: no decision after the sample before it (an action was still being carried out);
- ``engine_update``: ``t_s`` and an ``EngineUpdate`` (``run_id``, ``mode``, ``version``,
  ``previous``: the last good run on another engine version), known from then on;
- ``operator``: ``t_s``, ``action`` (pin, unpin, step, pause, resume, or ``reload`` with
  ``reload_pending``) and ``rung``, applied to the ladder before the next sample.

A trace of samples alone (``supervisor sample --watch > trace.jsonl``) replays too: a
decision is then taken after every sample.

``read_trace`` checks every record before replay sees it (issue 17: 346 of 1,504 mutated
traces ended in tracebacks): a torn last line, the normal state of a trace whose writer
was killed, is skipped with a warning; any other bad line is a ValueError naming the
file, the line number, the field and the reason.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from pydantic import TypeAdapter, ValidationError

from agent_supervisor.decide.decision import Decision
from agent_supervisor.privacy import mask_json
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.baselines import AcceptanceBaselines, Baselines, EngineUpdate
from agent_supervisor.telemetry.sample import Sample

__all__ = ["TRACE_VERSION", "TraceWriter", "read_trace"]

TRACE_VERSION = 1

logger = logging.getLogger(__name__)

_SAMPLE = TypeAdapter(Sample)
_SAMPLE_FIELDS = frozenset(f.name for f in dataclasses.fields(Sample))
_TYPES = ("header", "sample", "decision", "skip", "operator", "engine_update")


class TraceWriter:
    """Appends trace records to a file, one flushed line each, secrets masked
    (``privacy.mask_json``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)   # issue 17
        self._f: IO[str] | None = open(fd, "a", encoding="utf-8")  # noqa: SIM115

    def _write(self, record: dict[str, Any]) -> None:
        if self._f is not None:
            # Engine log lines and evidence can carry the engine's key (issue 34).
            self._f.write(json.dumps(mask_json(record), separators=(",", ":"),
                                     default=str) + "\n")
            self._f.flush()

    def header(self, *, fleet: str, t0_s: float, baselines: Baselines, rung: int = 0,
               last_trouble_s: float | None = None,
               acceptance: AcceptanceBaselines | None = None) -> None:
        """The first record: who recorded it and what it knew at the start (the ladder's
        rung after adoption or a host reset, its last trouble, the calibrated baselines
        and the usual acceptance by position per mode)."""
        self._write({"type": "header", "version": TRACE_VERSION, "fleet": fleet, "t0_s": t0_s,
                     "started_at": datetime.now(UTC).isoformat(), "rung": rung,
                     "last_trouble_s": last_trouble_s,
                     "baselines": {m: [list(b) for b in v] for m, v in baselines.items()},
                     "acceptance": {m: list(v) for m, v in (acceptance or {}).items()}})

    def sample(self, sample: Sample) -> None:
        """One tick's Sample."""
        self._write({"type": "sample", **sample.to_dict()})

    def decision(self, t_s: float, decision: Decision, *, advisory: bool = False) -> None:
        """The decision taken on the sample just written (``advisory``: only recorded as
        advice, advise mode: replay then moves the ladder as for a HOLD)."""
        self._write({"type": "decision", "t_s": t_s, **decision.to_dict(),
                     **({"advisory": True} if advisory else {})})

    def skip(self, t_s: float) -> None:
        """No decision on the sample just written (an action was in progress)."""
        self._write({"type": "skip", "t_s": t_s})

    def operator(self, t_s: float, action: str, rung: int | None = None,
                 **extra: object) -> None:
        """An operator lever pulled between two ticks (or a policy ``reload``)."""
        self._write({"type": "operator", "t_s": t_s, "action": action, "rung": rung, **extra})

    def engine_update(self, t_s: float, update: EngineUpdate) -> None:
        """The run's engine version against the last good run on another one (issue 29)."""
        self._write({"type": "engine_update", "t_s": t_s, **update.to_dict()})

    def close(self) -> None:
        """Close the file (later writes are dropped)."""
        if self._f is not None:
            self._f.close()
            self._f = None


def read_trace(path: Path, *, rungs: int | None = None,
               warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """All records of a trace file, each checked (see the module doc). A line without
    ``type`` is taken as a sample (``supervisor sample --watch`` output).

    ``rungs``: how many modes the replaying policy has (every rung in the trace must be
    one of them); ``warn`` gets the warning for a torn last line (default: the log).
    Raises: ValueError ``"<path>:<line>: <field>: <reason>"``; OSError.
    """
    records = []
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    torn = lines[-1] != b""              # the last line has no newline: cut short
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = _record(raw)
            _check_rungs(rec, rungs)
        except ValueError as exc:
            if torn and n == len(lines):
                (warn or logger.warning)(f"{path}:{n}: torn last line skipped ({exc})")
                break
            raise ValueError(f"{path}:{n}: {exc}") from None
        records.append(rec)
    return records


def _check_rungs(rec: dict[str, Any], rungs: int | None) -> None:
    if rungs is None:
        return
    for name in ("rung", "engine_rung"):
        value = rec.get(name)
        if isinstance(value, int) and value >= rungs:
            raise ValueError(f"{name} {value} is not a rung of the policy ({rungs} modes)")


def _record(raw: bytes) -> dict[str, Any]:
    """One trace line, checked. Raises ValueError (``field: reason``)."""
    try:
        rec = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {str(exc)[:200]}") from None
    if not isinstance(rec, dict):
        raise ValueError("not a JSON object")
    kind = rec.setdefault("type", "sample")
    if kind not in _TYPES:
        raise ValueError(f"type: unknown record type {str(kind)[:40]!r}")
    if kind == "sample":
        _check_sample(rec)
    elif kind == "header":
        _check(rec, "rung", int, optional=True, minimum=0)
        _check(rec, "t0_s", float, optional=True)
        _check(rec, "last_trouble_s", float, optional=True)
        _check_baselines(rec.get("baselines"))
    elif kind == "decision":
        _check(rec, "t_s", float, optional=True)
        _check(rec, "action", str)
        _check(rec, "rung", int, optional=True, minimum=0)
        _check(rec, "explanation", str, optional=True)
    elif kind == "engine_update":
        _check(rec, "t_s", float, optional=True)
        EngineUpdate.from_dict(rec)
    elif kind == "operator":
        _check(rec, "t_s", float, optional=True)
        _check(rec, "action", str)
        _check(rec, "rung", int, optional=rec.get("action") in ("unpin", "pause", "resume"),
               minimum=0)
    return rec


def _check(rec: dict[str, Any], name: str, kind: type, *, optional: bool = False,
           minimum: int | None = None) -> None:
    value = rec.get(name)
    if value is None:
        if not optional:
            raise ValueError(f"{name}: required")
        return
    ok = (isinstance(value, int | float) and not isinstance(value, bool)
          and math.isfinite(value)) if kind is float else (
        isinstance(value, kind) and not isinstance(value, bool))
    if not ok:
        raise ValueError(f"{name}: must be {'a finite number' if kind is float else kind.__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}")


def _check_sample(rec: dict[str, Any]) -> None:
    fields = {k: v for k, v in rec.items() if k != "type"}
    unknown = sorted(set(fields) - _SAMPLE_FIELDS)
    if unknown:
        raise ValueError(f"{str(unknown[0])[:60]}: not a Sample field")
    for name, value in fields.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name}: must be finite")
    if not isinstance(fields.get("t_s"), int | float) or isinstance(fields["t_s"], bool):
        raise ValueError("t_s: required, a number")
    _check(rec, "engine_rung", int, optional=True, minimum=0)
    try:
        sample = _SAMPLE.validate_python(fields)
    except ValidationError as exc:
        err = exc.errors(include_input=False)[0]
        raise ValueError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    # The values as validated ("1.5" -> 1.5), so replay compares numbers with numbers;
    # still in the JSON form Sample.from_dict reads: the state as its string, the worker
    # nodes as mappings (issue 29: NodeSample objects here broke every two-node replay).
    for name in fields:
        value = getattr(sample, name)
        if isinstance(value, EngineState):
            value = str(value)
        elif name == "nodes" and value is not None:
            value = [node.to_dict() for node in value]
        rec[name] = value


def _check_baselines(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise ValueError("baselines: must map a mode to [[concurrency, tokens/s]]")
    for mode, points in value.items():
        if not isinstance(points, list) or not all(
                isinstance(p, list) and len(p) == 2 and all(
                    isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
                    for x in p) for p in points):
            raise ValueError(f"baselines.{str(mode)[:40]}: must be [[concurrency, tokens/s]]")

"""``supervisor incident ID``: one incident with all its evidence, for a terminal.

What happened, how bad, the mode and engine run, what was done and how it ended, then
the findings worst first with their evidence, the mode transitions it caused, the
kernel lines and the engine's log tail (both as recorded, secrets masked; the tail
without the supervisor's own probe lines, ``show/probe_lines.py``, with their count).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agent_supervisor.record.models import IncidentRow, ModeTransitionRow
from agent_supervisor.show.probe_lines import hide_probe_lines

__all__ = ["format_value", "incident_detail"]


def _ts(dt: datetime | None) -> str:
    return "-" if dt is None else dt.strftime("%Y-%m-%d %H:%M:%S UTC")


def format_value(value: Any) -> str:
    """Evidence values for people: floats to 4 significant digits, None as ``unknown``,
    lists and objects as compact JSON."""
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, separators=(", ", ": "), default=str)
    return str(value)


def _finding_lines(n: int, f: dict[str, Any]) -> list[str]:
    head = f"  {n}. [{f.get('severity', '?')}] {f.get('kind', '?')}"
    if f.get("guard"):
        head += f" (guard {f['guard']})"
    lines = [head]
    if f.get("summary"):
        lines.append(f"     {f['summary']}")
    evidence = f.get("evidence") or {}
    width = max((len(str(k)) for k in evidence), default=0)
    lines += [f"       {str(k).ljust(width)}  {format_value(v)}" for k, v in evidence.items()]
    extra = {k: v for k, v in f.items()
             if k not in {"guard", "kind", "severity", "summary", "evidence"} and v is not None}
    lines += [f"       {k}: {format_value(v)}" for k, v in extra.items()]
    return lines


def incident_detail(row: IncidentRow, transitions: Sequence[ModeTransitionRow] = ()) -> str:
    """The full incident as text (see the module doc)."""
    ended = f", ended {_ts(row.ended_at)}" if row.ended_at is not None else ""
    mode = "-" if row.mode is None else f"{row.mode} (rung {row.rung})"
    out = [
        f"incident {row.id}: {row.kind} [{row.severity}]",
        f"  when         {_ts(row.started_at)}{ended}",
        f"  where        fleet {row.fleet}, host {row.host}",
        f"  mode         {mode}, engine run {row.run_id or '-'}",
        f"  action       {row.action}",
        f"  outcome      {row.outcome or '-'}",
        f"  explanation  {row.explanation}",
        "",
        f"findings ({len(row.findings)}, worst first):" if row.findings else "findings: none",
    ]
    for n, finding in enumerate(row.findings, 1):
        out += _finding_lines(n, finding) if isinstance(finding, dict) else [f"  {n}. {finding}"]
    if transitions:
        out += ["", "mode transitions:"]
        out += [f"  {_ts(t.at)}  {t.from_mode or '-'} -> {t.to_mode}  by {t.actor}: {t.reason}"
                for t in transitions]
    kernel = row.kernel_lines or []
    out += ["", f"kernel lines ({len(kernel)}):" if kernel else "kernel lines: none"]
    out += [f"  {line}" for line in kernel]
    kept, hidden = hide_probe_lines(row.log_tail + "\n") if row.log_tail else ("", 0)
    tail = kept.splitlines()
    probes = f", {hidden} probe lines hidden" if hidden else ""
    out += ["", f"engine log tail ({len(tail)} lines{probes}):" if tail
            else f"engine log tail: none{probes}"]
    out += [f"  | {line}" for line in tail]
    return "\n".join(out)

"""``supervisor history``: the mode timeline, one line per transition, oldest first."""

from __future__ import annotations

from collections.abc import Sequence

from agent_supervisor.record.models import ModeTransitionRow
from agent_supervisor.show.tables import table

__all__ = ["history_table"]


def history_table(rows: Sequence[ModeTransitionRow]) -> str:
    """Time (UTC), from -> to (with rungs), who moved it, the incident behind it, why."""
    if not rows:
        return "(no mode transitions recorded)"
    out = []
    for r in rows:
        frm = "-" if r.from_mode is None else f"{r.from_mode} ({r.from_rung})"
        out.append([r.at.strftime("%Y-%m-%d %H:%M:%S"), f"{frm} -> {r.to_mode} ({r.to_rung})",
                    r.actor, r.incident_id, r.reason])
    return table(["at (UTC)", "from -> to (rung)", "actor", "incident", "reason"], out)

"""Plain-text and JSON views of the policy and the store, for the command line."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agent_supervisor.policy.model import Policy, needs_restart, render_args
from agent_supervisor.privacy import mask_argv
from agent_supervisor.record.models import EngineRunRow, IncidentRow
from agent_supervisor.show.export import incident_dict, run_dict

__all__ = [
    "incidents_json", "incidents_table", "ladder_table", "runs_json", "runs_table", "table",
]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns under ``headers``; None shows as ``-``."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    return "\n".join(lines)


def _ts(dt: datetime | None) -> str | None:
    return None if dt is None else dt.strftime("%Y-%m-%d %H:%M:%S")


def ladder_table(policy: Policy) -> str:
    """The ladder, fastest first: rung, mode, whether reaching it needs a restart, args
    (secrets masked: ``privacy.mask_argv``)."""
    rows = []
    for i, mode in enumerate(policy.modes):
        restart = "-" if i == 0 else ("yes" if needs_restart(policy.modes[i - 1], mode) else "no")
        marker = "*" if i == policy.initial_rung else ""
        rows.append([f"{i}{marker}", mode.name, restart,
                     " ".join(mask_argv(render_args(mode.args)))])
    return table(["rung", "mode", "restart", "engine arguments"], rows)


def ladder_dicts(policy: Policy) -> list[dict[str, Any]]:
    """The ladder as ``ladder_table`` shows it, one object per rung (``--json``)."""
    return [{"rung": i, "mode": mode.name, "initial": i == policy.initial_rung,
             "speculative": mode.speculative, "description": mode.description,
             "restart_to_reach": None if i == 0
             else needs_restart(policy.modes[i - 1], mode),
             "engine_arguments": mask_argv(render_args(mode.args))}
            for i, mode in enumerate(policy.modes)]


def incidents_table(rows: Sequence[IncidentRow]) -> str:
    """One line per incident, newest first, explanation cut to the terminal's width."""
    width = shutil.get_terminal_size((160, 20)).columns
    out = []
    for r in rows:
        out.append([r.id, _ts(r.started_at), r.severity, r.kind, r.mode, r.action,
                    r.explanation])
    text = table(["id", "started (UTC)", "severity", "kind", "mode", "action", "explanation"],
                  out)
    return "\n".join(line[:width] for line in text.splitlines())


def incidents_json(rows: Sequence[IncidentRow]) -> str:
    """Incidents as a JSON array (every column; times ISO 8601 UTC)."""
    return json.dumps([incident_dict(r) for r in rows], indent=2)


def runs_table(rows: Sequence[EngineRunRow]) -> str:
    """One line per engine run, newest first."""
    out = []
    for r in rows:
        ready = None if r.startup_seconds is None else f"{r.startup_seconds:.1f}"
        code = r.exit_code if r.exit_signal is None else f"sig {r.exit_signal}"
        out.append([r.run_id, r.mode, _ts(r.started_at), ready, _ts(r.ended_at), r.outcome,
                    code, r.engine_version])
    return table(["run", "mode", "started (UTC)", "ready s", "ended (UTC)", "outcome", "exit",
                  "vllm"], out)


def runs_json(rows: Sequence[EngineRunRow]) -> str:
    """Engine runs as a JSON array (argv included, secrets masked)."""
    return json.dumps([run_dict(r) for r in rows], indent=2)

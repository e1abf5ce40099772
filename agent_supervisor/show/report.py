"""``supervisor report``: what the service did, and what advise mode would have done, and
how often (issue 31 item 1). Pure over incident rows: ``report_summary`` groups them,
``report_text`` and ``report_json`` say it.

An incident whose action is ``would_<action>`` (agent_supervisor/act/advice.py) is a
decision advise mode recorded and did not carry out; one whose action is a decision's
(``restart``, ``step_down`` ...) was carried out; ``supervision_mode`` incidents are the
switches between the two. Everything else (findings noted on a HOLD, resumptions,
start-up's records) is left out.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from agent_supervisor.act.advice import WOULD
from agent_supervisor.decide.decision import Action
from agent_supervisor.record.models import IncidentRow
from agent_supervisor.show.tables import table

__all__ = ["report_json", "report_summary", "report_text"]

#: Recorded actions that are decisions carried out (HOLD's notes are not).
DONE = frozenset(str(a) for a in Action if a not in (Action.HOLD, Action.START))
SUPERVISION_KIND = "supervision_mode"
#: Incidents whose action reads like a decision's but that no decision made.
NOT_DECISIONS = frozenset({SUPERVISION_KIND, "policy_reloaded"})


def _group(rows: list[IncidentRow]) -> list[dict[str, Any]]:
    """One entry per action, most frequent first: count, by finding kind, first, last."""
    by: dict[str, list[IncidentRow]] = {}
    for r in rows:
        by.setdefault(r.action, []).append(r)
    out = []
    for action, group in by.items():
        times = sorted(r.started_at for r in group)
        kinds = Counter(r.kind for r in group)
        out.append({"action": action, "count": len(group),
                    "kinds": dict(kinds.most_common()),
                    "first": times[0].isoformat(), "last": times[-1].isoformat(),
                    "last_explanation": max(group, key=lambda r: r.started_at).explanation})
    return sorted(out, key=lambda e: (-e["count"], e["action"]))


def report_summary(rows: Iterable[IncidentRow], since: datetime | None) -> dict[str, Any]:
    """The report over ``rows`` (any order): ``advised`` (would have done), ``done``
    (carried out), ``switches`` (act/advise, oldest first)."""
    rows = list(rows)
    advised = [r for r in rows if r.action.startswith(WOULD)]
    done = [r for r in rows if r.action in DONE and r.kind not in NOT_DECISIONS]
    switches = sorted((r for r in rows if r.kind == SUPERVISION_KIND),
                      key=lambda r: r.started_at)
    return {"since": None if since is None else since.isoformat(),
            "advised": {"decisions": len(advised), "by_action": _group(advised)},
            "done": {"decisions": len(done), "by_action": _group(done)},
            "switches": [{"at": r.started_at.isoformat(), "to": r.action,
                          "explanation": r.explanation} for r in switches]}


def _kinds(kinds: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in kinds.items())


def _clock(iso: str) -> str:
    return iso[:19].replace("T", " ")


def report_text(summary: dict[str, Any]) -> str:
    """The summary as text: the advice first (what, how often, why, first and last)."""
    since = summary["since"]
    lines = [f"since {_clock(since)} UTC" if since else "since the first record"]
    adv, done = summary["advised"], summary["done"]
    lines.append(f"would have done (advise mode, not carried out): {adv['decisions']} "
                 "decision(s)")
    if adv["by_action"]:
        lines.append(table(["action", "times", "because (finding kinds)", "first", "last"], [
            [e["action"].removeprefix(WOULD), e["count"], _kinds(e["kinds"]),
             _clock(e["first"]), _clock(e["last"])] for e in adv["by_action"]]))
        lines += [f"  last {e['action'].removeprefix(WOULD)}: {e['last_explanation']}"
                  for e in adv["by_action"]]
    lines.append(f"done (act mode): {done['decisions']} decision(s)")
    if done["by_action"]:
        lines.append(table(["action", "times", "because (finding kinds)", "first", "last"], [
            [e["action"], e["count"], _kinds(e["kinds"]), _clock(e["first"]),
             _clock(e["last"])] for e in done["by_action"]]))
    for s in summary["switches"]:
        lines.append(f"{_clock(s['at'])} supervision -> {s['to']}: {s['explanation']}")
    return "\n".join(lines)


def report_json(summary: dict[str, Any]) -> str:
    """The summary as one JSON object."""
    return json.dumps(summary, indent=2)

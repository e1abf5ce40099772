"""What the service makes of its gateway's reports beyond hold and release (issue 31):
``advised_verdict`` (``/ready`` while advising) and ``failover_incident`` (a failover on
the record). Wired by agent_supervisor/runtime/gateway_wiring.py; the gateway process's
entries come over agent_supervisor/runtime/gateway_link.py.

- ``advised_verdict``: in advise mode the ladder does not shed for a suspected hang (the
  decision is only advice, agent_supervisor/act/advice.py), so ``readiness_verdict``
  alone would keep ``/ready`` at 200 on a hung engine; the last decision's findings say
  it instead, for as long as they are found.
- ``failover_incident``: a ``FailoverLog`` entry (agent_supervisor/gateway/failover.py)
  as an incident of kind ``failover``: ``started`` (warning: requests left the local
  engine, with the hold's reason) and ``ended`` (info: with the counts).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agent_supervisor.act.incident import Incident
from agent_supervisor.decide.decision import Action, Decision

__all__ = ["HANG_KINDS", "advised_verdict", "failover_incident"]

#: The findings that make ``/ready`` say not ready while the service only advises.
HANG_KINDS = ("engine_hung", "engine_hang_suspected")


def advised_verdict(advising: bool, last: Decision | None) -> str | None:
    """While advising: ``"engine hang suspected (advise mode: the supervisor would shed,
    and does nothing)"`` when ``last`` (the last decision) found a hang; else None."""
    if not advising or last is None or last.action is Action.HOLD:
        return None
    for finding in last.findings:
        if finding.kind in HANG_KINDS:
            what = finding.kind.replace("_", " ")
            return f"{what} (advise mode: the supervisor would {last.action}, and does nothing)"
    return None


def failover_incident(entry: dict[str, Any], mode: str) -> Incident:
    """The incident of one failover entry (``event``: ``started`` or ``ended``)."""
    at = datetime.fromtimestamp(entry["at"], UTC)
    names = ", ".join(entry.get("fallbacks") or []) or "none"
    if entry["event"] == "started":
        return Incident(
            kind="failover", severity="warning", started_at=at, action="failover",
            mode=mode, outcome="started", findings=[entry],
            explanation=f"the local engine was held {entry.get('held_seconds', 0):.1f} s "
            f"({entry.get('reason')}): requests go to the fallbacks ({names})")
    started = datetime.fromtimestamp(entry.get("started_at", entry["at"]), UTC)
    return Incident(
        kind="failover", severity="info", started_at=started, ended_at=at,
        action="failover", mode=mode, outcome="ended", findings=[entry],
        explanation=f"the local engine serves again after {entry.get('held_seconds', 0):.1f}"
        f" s held ({entry.get('reason')}): {entry.get('requests', 0)} requests were served "
        f"by {names}, {entry.get('failures', 0)} tries of a fallback failed")

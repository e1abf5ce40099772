"""Webhook alerts: emergency and critical incidents, every step down, and the recoveries:
every step back up, and the engine serving again after an alerted incident.

Sending never blocks a decision: ``notify`` only queues; one task posts with retries
and backoff. The same kind of alert is sent at most once per ``min_interval_seconds``
(later ones are counted as suppressed). Payloads: ``generic`` (the incident and the
transition as JSON, ``"recovery": true`` for a step up or the engine serving again) or
``slack`` (``{"text": ...}``, what Slack's incoming webhooks take).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx

from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.policy.sections import AlertSpec

if TYPE_CHECKING:
    from agent_supervisor.policy import Policy, PolicyHolder

__all__ = ["Alerter", "alert_payload", "recovery_payload"]

logger = logging.getLogger(__name__)

ALERT_SEVERITIES = ("emergency", "critical")
#: Warnings that ask for no action yet must reach a person: a known crash precursor; a kernel
#: log the service cannot read (its Xid, NV_ERR_NO_MEMORY and OOM guards are blind, issue 34);
#: a gateway process that refused a reload (it and the supervisor run different policies,
#: issue 30).
ALERT_KINDS = ("spec_acceptance_anomaly", "kernel_log_unreadable", "gateway_policy_refused")
#: Actions a person hears of whatever the severity: a planned restart interrupts serving
#: (memory creep handed back at a calm moment, a launch-lottery redraw). Advise mode's
#: would-be ones too, and its step down (acting, the rung change alerts: no transition
#: is recorded for advice).
ALERT_ACTIONS = ("planned_restart", "would_planned_restart", "would_step_down")


def alert_payload(fleet: str, incident: Incident, transition: Transition | None,
                  fmt: str) -> dict[str, Any]:
    """The JSON body of one alert, with the worst finding's recommended action (NVIDIA
    NVSentinel's words: RESTART_BM, COMPONENT_RESET, ...) and, for a GPU that is gone, the
    kernel lines it was seen in."""
    worst = incident.findings[0] if incident.findings else {}
    action = worst.get("recommended_action") if isinstance(worst, dict) else None
    evidence = worst.get("evidence") if isinstance(worst, dict) else None
    kernel = (evidence or {}).get("kernel_lines") if isinstance(evidence, dict) else None
    up = _moved(transition) < 0
    if fmt == "slack":
        move = f" {transition.from_mode} -> {transition.to_mode}." if transition else ""
        if up:
            return {"text": f":white_check_mark: [{fleet}] stepped back up{move} "
                            f"{incident.explanation}."}
        todo = f" Recommended action: {action}." if action and action != "NONE" else ""
        lines = "\n```" + "\n".join(kernel) + "```" if kernel else ""
        return {"text": f":rotating_light: [{fleet}] {incident.severity.upper()} "
                        f"{incident.kind} in mode {incident.mode}: {incident.explanation}."
                        f"{move}{todo}{lines}"}
    return {"fleet": fleet, "kind": incident.kind, "severity": incident.severity,
            "recommended_action": action, "kernel_lines": kernel,
            "recovery": up,
            "started_at": incident.started_at.isoformat(), "mode": incident.mode,
            "action": incident.action, "explanation": incident.explanation,
            "outcome": incident.outcome, "run_id": incident.run_id,
            "transition": None if transition is None else {
                "from_mode": transition.from_mode, "to_mode": transition.to_mode,
                "actor": transition.actor, "reason": transition.reason},
            "src": "supervisor"}


def recovery_payload(fleet: str, mode: str, run_id: str, after: Incident,
                     fmt: str) -> dict[str, Any]:
    """The JSON body of the alert "the engine serves again" (after ``after``)."""
    text = (f"engine serving again in mode {mode} (run {run_id}) after "
            f"{after.kind} at {after.started_at.isoformat(timespec='seconds')}")
    if fmt == "slack":
        return {"text": f":white_check_mark: [{fleet}] {text}."}
    return {"fleet": fleet, "kind": "engine_serving", "severity": "info", "recovery": True,
            "started_at": datetime.now(UTC).isoformat(), "mode": mode, "action": "none",
            "explanation": text, "outcome": None, "run_id": run_id, "transition": None,
            "after": {"kind": after.kind, "severity": after.severity,
                      "started_at": after.started_at.isoformat()},
            "src": "supervisor"}


def _moved(transition: Transition | None) -> int:
    """+1 for a step down, -1 for a step up, 0 for no move."""
    if transition is None or transition.from_rung is None:
        return 0
    return (transition.to_rung > transition.from_rung) - (transition.to_rung
                                                          < transition.from_rung)


class Alerter:
    """Queues alerts and posts them from one background task."""

    def __init__(self, spec: AlertSpec, fleet: str, counter: Any = None, *,
                 url: str | None = None) -> None:
        """``url``: the webhook (``Policy.webhook_url``, which reads ``webhook_url_file``
        or the systemd credential); default ``spec.webhook_url``. Never logged: it
        usually holds the webhook's token."""
        self.spec = spec
        self.url = url or spec.webhook_url
        self.fleet = fleet
        self._counter = counter
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)
        self._last: dict[str, float] = {}
        self._trouble: Incident | None = None
        """The alerted incident the engine has not served since (for the recovery)."""
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None

    def _count(self, outcome: str) -> None:
        if self._counter is not None:
            self._counter.labels(outcome).inc()

    def start(self) -> None:
        """Start the sender task (no-op without a webhook URL)."""
        if self.url:
            self._client = httpx.AsyncClient(timeout=self.spec.timeout_seconds)
            self._task = asyncio.get_running_loop().create_task(self._send_loop())

    def follow(self, holder: PolicyHolder) -> None:
        """Take the policy's ``alerts`` section at each reload (the holder's swaps; the
        webhook URL stays: it is read once, at start)."""
        def swapped(old: Policy, new: Policy) -> None:
            self.spec = new.alerts
        holder.on_swap(swapped)

    def notify(self, incident: Incident, transition: Transition | None) -> bool:
        """Queue an alert if this incident calls for one. Returns whether it was queued.

        Incidents of one kind are rate-limited (``min_interval_seconds``); a step down
        never is: the ladder's own limits (cooldown, transitions per hour) bound those,
        and the one that follows a run of crashes is the alert that matters most. A step
        back up (a recovery) is not limited either, for the same reason. An operator's own
        move (``supervisor step down``, a pin) is no news to a person: it alerts only if
        the incident does by itself (issue 33, "operator actions never page")."""
        operator = transition is not None and transition.actor == "operator"
        moved = 0 if operator else _moved(transition)
        if not self.url or not (incident.severity in ALERT_SEVERITIES or moved
                                or incident.kind in ALERT_KINDS
                                or incident.action in ALERT_ACTIONS):
            return False
        if moved > 0 or incident.severity in ALERT_SEVERITIES:
            self._trouble = incident
        now = time.monotonic()
        last = self._last.get(incident.kind)
        if not moved and last is not None and now - last < self.spec.min_interval_seconds:
            self._count("suppressed")
            return False
        self._last[incident.kind] = now
        return self._put(alert_payload(self.fleet, incident, transition, self.spec.format))

    def engine_serving(self, mode: str, run_id: str) -> bool:
        """The engine became ready: a recovery alert if an alerted incident came before
        it (once per incident; never rate-limited). Returns whether one was queued."""
        after, self._trouble = self._trouble, None
        if not self.url or after is None:
            return False
        return self._put(recovery_payload(self.fleet, mode, run_id, after, self.spec.format))

    def _put(self, payload: dict[str, Any]) -> bool:
        try:
            self._queue.put_nowait(payload)
        except asyncio.QueueFull:
            self._count("suppressed")
            return False
        return True

    async def _send_loop(self) -> None:
        assert self._client is not None and self.url is not None
        while True:
            payload = await self._queue.get()
            for attempt in range(self.spec.retries + 1):
                try:
                    resp = await self._client.post(self.url, json=payload)
                    if resp.status_code < 300:
                        self._count("sent")
                        break
                    error = f"HTTP {resp.status_code}"
                except httpx.HTTPError as exc:
                    # httpx puts the URL in some messages: never log it (issue 17).
                    error = f"{exc.__class__.__name__}: {exc}".replace(self.url, "<webhook>")
                if attempt == self.spec.retries:
                    self._count("failed")
                    logger.warning("alert not delivered after %d tries: %s", attempt + 1, error)
                else:
                    await asyncio.sleep(min(30.0, 0.5 * 2**attempt))

    async def close(self) -> None:
        """Stop sending (alerts still queued are dropped)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

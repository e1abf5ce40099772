"""Webhook alerts: emergency and critical incidents, and every step down.

Sending never blocks a decision: ``notify`` only queues; one task posts with retries
and backoff. The same kind of alert is sent at most once per ``min_interval_seconds``
(later ones are counted as suppressed). Payloads: ``generic`` (the incident and the
transition as JSON) or ``slack`` (``{"text": ...}``, what Slack's incoming webhooks take).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx

from supervisor.act.incident import Incident, Transition
from supervisor.policy_guards import AlertSpec

__all__ = ["Alerter", "alert_payload"]

logger = logging.getLogger(__name__)

ALERT_SEVERITIES = ("emergency", "critical")
#: Warnings that ask for no action yet must reach a person: a known crash precursor.
ALERT_KINDS = ("spec_acceptance_anomaly",)


def alert_payload(fleet: str, incident: Incident, transition: Transition | None,
                  fmt: str) -> dict[str, Any]:
    """The JSON body of one alert, with the worst finding's recommended action (NVIDIA
    NVSentinel's words: RESTART_BM, COMPONENT_RESET, ...) and, for a GPU that is gone, the
    kernel lines it was seen in."""
    worst = incident.findings[0] if incident.findings else {}
    action = worst.get("recommended_action") if isinstance(worst, dict) else None
    evidence = worst.get("evidence") if isinstance(worst, dict) else None
    kernel = (evidence or {}).get("kernel_lines") if isinstance(evidence, dict) else None
    if fmt == "slack":
        move = f" {transition.from_mode} -> {transition.to_mode}." if transition else ""
        todo = f" Recommended action: {action}." if action and action != "NONE" else ""
        lines = "\n```" + "\n".join(kernel) + "```" if kernel else ""
        return {"text": f":rotating_light: [{fleet}] {incident.severity.upper()} "
                        f"{incident.kind} in mode {incident.mode}: {incident.explanation}."
                        f"{move}{todo}{lines}"}
    return {"fleet": fleet, "kind": incident.kind, "severity": incident.severity,
            "recommended_action": action, "kernel_lines": kernel,
            "started_at": incident.started_at.isoformat(), "mode": incident.mode,
            "action": incident.action, "explanation": incident.explanation,
            "outcome": incident.outcome, "run_id": incident.run_id,
            "transition": None if transition is None else {
                "from_mode": transition.from_mode, "to_mode": transition.to_mode,
                "actor": transition.actor, "reason": transition.reason},
            "src": "supervisor"}


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

    def notify(self, incident: Incident, transition: Transition | None) -> bool:
        """Queue an alert if this incident calls for one. Returns whether it was queued.

        Incidents of one kind are rate-limited (``min_interval_seconds``); a step down
        never is: the ladder's own limits (cooldown, transitions per hour) bound those,
        and the one that follows a run of crashes is the alert that matters most."""
        step_down = transition is not None and transition.to_rung > (transition.from_rung or 0)
        if not self.url or not (incident.severity in ALERT_SEVERITIES or step_down
                                or incident.kind in ALERT_KINDS):
            return False
        now = time.monotonic()
        last = self._last.get(incident.kind)
        if not step_down and last is not None and now - last < self.spec.min_interval_seconds:
            self._count("suppressed")
            return False
        self._last[incident.kind] = now
        try:
            self._queue.put_nowait(alert_payload(self.fleet, incident, transition,
                                                 self.spec.format))
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

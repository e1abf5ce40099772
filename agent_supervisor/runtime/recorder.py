"""``Recorder``: the only sink that turns an incident or a transition into a record, a
metric and an alert.

The executor (through ``act.effects.RecordSink``) and start-up (the previous life,
leftovers, adoption) and policy reloads all record here, so an incident the service
writes itself counts in ``supervisor_incidents_total`` and reaches the webhook like one
a guard raised (issue 18: a critical ``host_reset`` used to send neither).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_supervisor.act.engine_run import EngineRun
from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.decide.findings import Finding
from agent_supervisor.record.records import AddIncident, AddRun, Record, UpdateRun
from agent_supervisor.record.writer import RecordWriter
from agent_supervisor.show.alerts import Alerter
from agent_supervisor.show.metrics import SupervisorMetrics, transition_cause

__all__ = ["Recorder"]


class Recorder:
    """Writes through ``writer`` (ordered, spooled when the database is down), counts in
    ``metrics`` and queues alerts with ``alerter``. Never blocks: ``submit`` and
    ``notify`` only queue."""

    def __init__(self, writer: RecordWriter, metrics: SupervisorMetrics,
                 alerter: Alerter) -> None:
        self.writer = writer
        self.metrics = metrics
        self.alerter = alerter

    def incident(self, incident: Incident, transition: Transition | None = None,
                 findings: tuple[Finding, ...] = (), *, key: str | None = None) -> None:
        """Record ``incident`` (and ``transition``), count it and its ``findings``, and
        alert on it when the alert policy calls for it. ``key``: the idempotency key
        (one derived from what happened, so a retried start does not report it twice);
        default a fresh one."""
        record = AddIncident(incident=incident, transition=transition) if key is None \
            else AddIncident(key=key, incident=incident, transition=transition)
        self.writer.submit(record)
        self.metrics.incidents.labels(incident.kind, incident.severity).inc()
        for f in findings:
            self.metrics.findings.labels(f.guard, f.kind, str(f.severity)).inc()
        if transition is not None:
            self.metrics.transitions.labels(transition.from_mode or "", transition.to_mode,
                                            transition.actor).inc()
            if transition.from_rung is not None and transition.to_rung != transition.from_rung:
                direction = "down" if transition.to_rung > transition.from_rung else "up"
                self.metrics.rung_changes.labels(direction,
                                                 transition_cause(transition.actor)).inc()
        self.alerter.notify(incident, transition)

    def engine_serving(self, mode: str, run_id: str) -> None:
        """The engine became ready: the recovery alert, if an alerted incident came
        before it (``Alerter.engine_serving``)."""
        self.alerter.engine_serving(mode, run_id)

    def incident_record(self, record: AddIncident) -> None:
        """``incident`` for a ready-made record (start-up's verdict keeps its key)."""
        self.incident(record.incident, record.transition, key=record.key)

    def decision(self, action: str) -> None:
        """Count a non-HOLD decision being carried out."""
        self.metrics.decisions.labels(action).inc()

    def run_started(self, run: EngineRun, port: int) -> None:
        """Record an engine run at launch."""
        self.writer.submit(AddRun(
            run_id=run.run_id, mode=run.mode, rung=run.rung, argv=list(run.argv), pid=run.pid,
            port=port, log_path=str(run.log_path), started_at=run.started_at,
            mem_available_before_bytes=run.mem_available_before_bytes))

    def run_changed(self, run_id: str, values: Mapping[str, Any]) -> None:
        """Update an engine run's row (ready, version, end)."""
        self.writer.submit(UpdateRun(run_id=run_id, values=dict(values)))

    def write(self, record: Record) -> None:
        """Any other record (service lives, heartbeats, telemetry). An ``AddIncident``
        is refused here (ValueError): incidents go through ``incident``."""
        if isinstance(record, AddIncident):
            raise ValueError("incidents go through Recorder.incident (metric and alert)")
        self.writer.submit(record)

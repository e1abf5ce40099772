"""Carry out a Decision: the only place where a decision turns into process actions and
records. ``decide()`` never logs; this module logs one INFO line per action it takes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from supervisor.act.launcher import EngineLauncher, EngineRun
from supervisor.decide.decision import Action, Decision
from supervisor.errors import EngineStopTimeout
from supervisor.policy import Policy
from supervisor.record.store import Incident, Store
from supervisor.record.writer import RecordWriter
from supervisor.states import CrashReason

__all__ = ["Executor"]

logger = logging.getLogger(__name__)

#: Lines of the engine's log kept with an incident.
LOG_TAIL_LINES = 80


class Executor:
    """Performs Decisions with the launcher and records what happened.

    ``poke_at(delay_s)`` asks the service for a decision after ``delay_s`` seconds (the
    restart backoff); ``give_up()`` asks it to stop with exit status 1.
    """

    def __init__(
        self,
        policy: Policy,
        launcher: EngineLauncher,
        writer: RecordWriter,
        *,
        poke_at: Callable[[float], None],
        give_up: Callable[[], None],
    ) -> None:
        self.policy = policy
        self.launcher = launcher
        self.writer = writer
        self._poke_at = poke_at
        self._give_up = give_up

    async def carry_out(self, decision: Decision, *, from_rung: int) -> None:
        """Do what ``decision`` says. Blocks for as long as stopping the engine takes.

        START launches the rung's mode. RESTART, STEP_DOWN and GIVE_UP first record the
        incident (with the engine's log tail), then clear the old engine's process group,
        then (STEP_DOWN) record the transition; the next start comes from the next
        decision, at once or after the backoff.
        """
        logger.info("action %s: %s", decision.action, decision.explanation)
        if decision.action is Action.START:
            await self._start(decision.rung)
            return
        if decision.action is Action.HOLD:
            return
        self._record_incident(decision, from_rung)
        worst = decision.findings[0] if decision.findings else None
        crash = None
        if worst is not None and worst.kind in set(CrashReason):
            crash = CrashReason(worst.kind)
        try:
            await self.launcher.kill(
                reason=f"{decision.action}: {worst.kind}" if worst else str(decision.action),
                crash=crash)
        except EngineStopTimeout as exc:
            logger.error("%s", exc)
            self._record(Incident(
                kind="engine_stop_timeout", severity="critical", started_at=_now(),
                action="none", explanation=str(exc), run_id=decision.run_id,
                findings=[{"survivors": exc.survivors}],
            ))
        if decision.action is Action.GIVE_UP:
            self._give_up()
            return
        self._poke_at(decision.delay_seconds)

    async def _start(self, rung: int) -> None:
        run = await self.launcher.start(rung=rung)
        port = self.policy.engine.port
        self.writer.submit(lambda store: store.add_run(
            run_id=run.run_id, mode=run.mode, rung=run.rung, argv=run.argv, pid=run.pid,
            port=port, log_path=str(run.log_path), started_at=run.started_at))

    def _record(self, incident: Incident, transition: dict | None = None) -> None:
        def write(store: Store) -> None:
            incident_id = store.add_incident(incident=incident)
            if transition is not None:
                store.add_transition(incident_id=incident_id, **transition)
        self.writer.submit(write)

    def _record_incident(self, decision: Decision, from_rung: int) -> None:
        run = self.launcher.run
        worst = decision.findings[0] if decision.findings else None
        incident = Incident(
            kind=worst.kind if worst else str(decision.action),
            severity=str(worst.severity) if worst else "info",
            started_at=_now(),
            action=str(decision.action),
            explanation=decision.explanation,
            mode=self.policy.modes[from_rung].name,
            rung=from_rung,
            run_id=decision.run_id,
            findings=[f.to_dict() for f in decision.findings],
            log_tail=_log_tail(run),
            outcome=_outcome(decision, self.policy),
        )
        transition = None
        if decision.action is Action.STEP_DOWN:
            transition = {
                "at": incident.started_at, "from_mode": self.policy.modes[from_rung].name,
                "to_mode": self.policy.modes[decision.rung].name, "from_rung": from_rung,
                "to_rung": decision.rung, "reason": decision.explanation,
                "actor": f"guard:{worst.guard}" if worst else "supervisor",
            }
        self._record(incident, transition)


def _outcome(decision: Decision, policy: Policy) -> str:
    mode = policy.modes[decision.rung].name
    match decision.action:
        case Action.RESTART:
            return f"restart of mode {mode} in {decision.delay_seconds:g} s"
        case Action.STEP_DOWN:
            return f"stepped down to mode {mode}"
        case Action.GIVE_UP:
            return "gave up: service exits 1"
    return str(decision.action)


def _log_tail(run: EngineRun | None) -> str | None:
    """The last LOG_TAIL_LINES lines the engine wrote, caught up to now."""
    if run is None or run.log_tail is None:
        return None
    run.log_tail.poll()
    lines = run.log_tail.text().splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _now() -> datetime:
    return datetime.now(UTC)


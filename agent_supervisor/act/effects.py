"""Carry out a Decision: the only place where a decision turns into process actions and
records. ``decide()`` never logs; this module logs one INFO line per action it takes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from agent_supervisor.act.advice import AdviceLog, carried_out, would
from agent_supervisor.act.compile_cache import compile_cache_dirs, move_aside
from agent_supervisor.act.engine_env import engine_environment
from agent_supervisor.act.engine_run import EngineRun
from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.act.stack_dump import StackDump
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Finding, Severity
from agent_supervisor.errors import EngineStopTimeout, PolicyError
from agent_supervisor.policy import Policy, PolicyHolder
from agent_supervisor.states import CrashReason, EngineState

__all__ = ["EngineControl", "Executor", "GatewayControl", "RecordSink"]

logger = logging.getLogger(__name__)

#: Lines of the engine's log kept with an incident.
LOG_TAIL_LINES = 80
#: Findings whose kill waits for the engine's stacks (issue 31): a hung engine's, read
#: within ``lifecycle.stack_dump_seconds`` (a crashed engine has no stack left to read,
#: and an emergency kill must not wait).
STACK_KINDS = ("engine_hung",)
#: Findings an incident carries the run's stacks with: the hang, and the stop whose
#: SIGTERM was ignored (read by the launcher before its SIGKILL).
STACK_EVIDENCE_KINDS = ("engine_hung", "sigterm_ignored")


class GatewayControl(Protocol):
    """What the executor asks of the gateway around a switch (the gateway implements it)."""

    async def hold(self, reason: str, *, drain: bool = True) -> None:
        """Stop admitting new requests to the engine (they queue); with ``drain``, let
        in-flight ones finish, waiting at most the drain timeout."""

    def release(self, rung: int) -> None:
        """The engine is serving in ``rung``: admit again, with that mode's limits."""

    def set_shed(self, shed: bool) -> None:
        """Multiply the current limits by the policy's shed factor (True) or restore them."""


class EngineControl(Protocol):
    """What the executor asks of the engine's owner (``EngineLauncher`` implements it).

    ``start`` returns once the process is launched (not ready); ``stop`` drains and
    waits (raises EngineStopTimeout with ``.survivors``); ``kill`` SIGKILLs the group.
    """

    @property
    def state(self) -> EngineState:
        """The engine's lifecycle state now."""

    @property
    def run(self) -> EngineRun | None:
        """The current (or last) engine run, None before the first start."""

    async def start(self, *, rung: int,
                    start_args: tuple[tuple[str, object], ...] = ()) -> EngineRun:
        """Launch the engine in ``rung``'s mode (``start_args``: a start-up fallback's
        flags over the mode's)."""

    async def stop(self, *, reason: str) -> EngineRun | None:
        """Stop gracefully: SIGTERM, wait, SIGKILL the group. Returns the run stopped
        (the executor does not read it; None: none, or an owner that does not say)."""

    async def kill(self, *, reason: str, crash: CrashReason | None = None,
                   emergency: str | None = None) -> EngineRun | None:
        """SIGKILL the process group at once. Returns as ``stop``."""

    async def dump_stacks(self, reason: str) -> StackDump | None:
        """Read the current run's processes' stacks, within the policy's bound
        (``lifecycle.stack_dump_seconds``); None without a run. Optional: an owner
        without it gives incidents no stacks."""


class RecordSink(Protocol):
    """Where the executor's records go (the service's ``Recorder``): every incident and
    transition becomes a record, a metric and an alert there, and nowhere else."""

    def decision(self, action: str) -> None:
        """A non-HOLD decision is being carried out (counted)."""

    def incident(self, incident: Incident, transition: Transition | None = None,
                 findings: tuple[Finding, ...] = ()) -> None:
        """Record ``incident`` (with the rung change, if any) and alert on it."""

    def run_started(self, run: EngineRun, port: int) -> None:
        """An engine run was launched on ``port``."""


class Executor:
    """Performs Decisions with the engine's owner and records what happened.

    ``poke_at(delay_s)`` asks the service for a decision after ``delay_s`` seconds (the
    restart backoff); ``give_up()`` asks it to stop with exit status 1;
    ``kernel_lines()`` gives the recent classified kernel lines kept for incidents;
    ``advising()`` says whether the service only advises (``mode: advise``; default
    never): ``advisory`` is then the one gate between a decision and its effects.
    """

    def __init__(
        self,
        policy: Policy | PolicyHolder,
        launcher: EngineControl,
        recorder: RecordSink,
        *,
        poke_at: Callable[[float], None],
        give_up: Callable[[], None],
        kernel_lines: Callable[[], list[str]] | None = None,
        gateway: GatewayControl | None = None,
        advising: Callable[[], bool] | None = None,
    ) -> None:
        self._policy = PolicyHolder.of(policy)
        self.launcher = launcher
        self.recorder = recorder
        self.gateway = gateway
        self._poke_at = poke_at
        self._give_up = give_up
        self._kernel_lines = kernel_lines or list
        self._noted: set[tuple[str | None, str]] = set()
        self._advising = advising or (lambda: False)
        self._advice = AdviceLog()

    @property
    def policy(self) -> Policy:
        """The policy in force (read on use)."""
        return self._policy.current

    def advisory(self, decision: Decision) -> bool:
        """The gate of advisory mode: whether ``decision`` is only recorded as what it
        would have done (``act/advice.carried_out``: advising, and not the engine's first
        launch nor a HOLD), or one the engine's owner cannot carry out (``cannot``: an
        adopted engine's mode change, ``act/adopt.py``). The tick asks before it moves the
        ladder."""
        stopped = self.launcher.state is EngineState.STOPPED   # on purpose: by a lever
        return not carried_out(decision, advising=self._advising(),
                               launched=self.launcher.run is not None and not stopped) \
            or self.cannot(decision) is not None

    def cannot(self, decision: Decision) -> str | None:
        """Why the engine's owner cannot carry out ``decision`` (its optional
        ``cannot_carry_out``: an adopted engine it cannot relaunch); None: it can."""
        why = getattr(self.launcher, "cannot_carry_out", None)
        return None if why is None else why(decision)

    async def carry_out(self, decision: Decision, *, from_rung: int,
                        advisory: bool | None = None) -> None:
        """Do what ``decision`` says. Blocks for as long as stopping the engine takes.

        START launches the rung's mode (with a start-up fallback's flags when the decision
        carries them). RESTART, STEP_DOWN, PLANNED_RESTART, KILL_NOW, STEP_UP, GIVE_UP and
        REBOOT_REQUIRED record the incident (with the engine's log tail; the alert goes
        with it) and the transition, then clear the old engine: SIGKILL to its group for a
        crash or an emergency, a drain for a graceful step. The next start comes from the next
        decision, at once or after the backoff. A hung engine's stacks are read before
        its incident and kill (``_read_stacks``: at most ``lifecycle.stack_dump_seconds``).
        SHED moves the gateway's limits. HOLD records findings the first time they appear
        in a run. ``advisory`` (default: ``advisory(decision)``, the tick's answer): only
        record it as advice (``_advise``).
        """
        if self.advisory(decision) if advisory is None else advisory:
            await self._advise(decision, from_rung)
            return
        action = decision.action
        if action is Action.HOLD:
            self._note(decision, from_rung)
            return
        if decision.operator and self._advising():
            decision = dataclasses.replace(decision, explanation="the operator's lever, "
                                           f"carried out in advise mode: {decision.explanation}")
        self._advice.clear()
        logger.info("action %s: %s", action, decision.explanation)
        self.recorder.decision(str(action))
        if action is Action.START:
            self._note(decision, from_rung)    # e.g. sigterm_ignored of the run before
            await self._start(decision.rung, decision.start_args)
            return
        if action is Action.SHED:
            self._record_incident(decision, from_rung)
            if self.gateway is not None:
                self.gateway.set_shed(bool(decision.shed))
            else:
                logger.info("no gateway attached: shedding has no lever to pull")
            return
        at = _now()                # the verdict's time, not the end of the stack dump
        await self._read_stacks(decision)
        self._record_incident(decision, from_rung, at)
        try:
            await self._clear(decision)
        except EngineStopTimeout as exc:
            logger.error("%s", exc)
            self.recorder.incident(Incident(
                kind="engine_stop_timeout", severity="critical", started_at=_now(),
                action="none", explanation=str(exc), run_id=decision.run_id,
                findings=[{"survivors": exc.survivors}]))
        if decision.move_caches:
            self._move_caches(decision)
        if action is Action.GIVE_UP:
            self._give_up()
            return
        self._poke_at(decision.delay_seconds)

    async def _advise(self, decision: Decision, from_rung: int) -> None:
        """Advisory mode: record what ``decision`` would have done, with the evidence it
        would have had (a hung engine's stacks too: reading them stops nothing), once
        while it keeps being decided (``AdviceLog``), and alert as ever. Nothing else:
        no kill, stop, start, hold, shed, backoff or give-up."""
        if not self._advice.first(decision, time.monotonic()):
            return
        logger.info("advise: would %s: %s", decision.action, decision.explanation)
        self.recorder.decision(would(decision.action))
        at = _now()
        await self._read_stacks(decision)
        self._record_incident(decision, from_rung, at, advised=True)

    async def _read_stacks(self, decision: Decision) -> None:
        """A hung engine is about to be SIGKILLed: read its stacks first (at most
        ``lifecycle.stack_dump_seconds``) onto its run, for the incident."""
        worst = decision.findings[0] if decision.findings else None
        dump = getattr(self.launcher, "dump_stacks", None)
        run = self.launcher.run
        if worst is None or worst.kind not in STACK_KINDS or dump is None or run is None \
                or worst.run_id not in (None, run.run_id):
            return
        run.stacks = await dump(f"{decision.action}: {worst.kind}")

    async def _clear(self, decision: Decision) -> None:
        """Stop the current engine the way the decision calls for."""
        worst = decision.findings[0] if decision.findings else None
        graceful = decision.action in (Action.STEP_DOWN, Action.STEP_UP, Action.RELOAD,
                                       Action.PLANNED_RESTART) and (
            self.launcher.state is EngineState.READY
            and (worst is None or worst.severity is not Severity.CRITICAL))
        if graceful:
            if self.gateway is not None:
                await self.gateway.hold(decision.explanation)
            await self.launcher.stop(reason=f"{decision.action} to "
                                     f"{self.policy.modes[decision.rung].name}")
            return
        crash = None
        if worst is not None and worst.kind in set(CrashReason):
            crash = CrashReason(worst.kind)
        emergency = worst.kind if decision.action is Action.KILL_NOW and worst else None
        reason = f"{decision.action}: {worst.kind}" if worst else str(decision.action)
        if self.gateway is not None:
            await self.gateway.hold(reason, drain=False)
        await self.launcher.kill(reason=reason, crash=crash, emergency=emergency)

    def _move_caches(self, decision: Decision) -> None:
        """A poisoned compile cache: rename the engine's caches before the relaunch."""
        try:
            env = engine_environment(self.policy, Path(tempfile.gettempdir()))
        except PolicyError:                # an unreadable api_key_file: the paths still hold
            env = dict(os.environ)
        moved = move_aside(compile_cache_dirs(env, Path.home()), decision.run_id or "start")
        logger.info("compile caches moved aside before the relaunch: %s",
                    ", ".join(f"{a} -> {b}" for a, b in moved) or "none found")

    async def _start(self, rung: int, start_args: tuple[tuple[str, object], ...] = ()) -> None:
        before = self.launcher.run
        run = await self.launcher.start(rung=rung, start_args=start_args)
        if run is not None and run is not before:     # an engine to adopt not found yet
            self.recorder.run_started(run, self.policy.engine.port)

    def engine_ready(self, rung: int) -> None:
        """The engine became ready: let the gateway admit again in this mode."""
        if self.gateway is not None:
            self.gateway.release(rung)

    def _note(self, decision: Decision, from_rung: int) -> None:
        """Record findings that appear in a HOLD (info, or a warning held back) once per run."""
        for f in decision.findings:
            key = (f.run_id, f.kind)
            if key in self._noted:
                continue
            self._noted.add(key)
            logger.info("noted %s (%s): %s", f.kind, f.severity, f.summary)
            self.recorder.incident(self._incident(decision, from_rung, f, action="hold"),
                                  findings=(f,))

    def _incident(self, decision: Decision, from_rung: int, worst: Finding | None,
                  action: str, at: datetime | None = None) -> Incident:
        run = self.launcher.run
        findings = [f.to_dict() for f in decision.findings]
        return Incident(
            kind=worst.kind if worst else str(decision.action),
            severity=str(worst.severity) if worst else "info",
            started_at=at or _now(), action=action,
            explanation=_with_stacks(decision.explanation, findings, run, worst),
            mode=self.policy.modes[from_rung].name, rung=from_rung, run_id=decision.run_id
            or (worst.run_id if worst else None),
            findings=findings,
            log_tail=_log_tail(run), kernel_lines=self._kernel_lines(),
            outcome=_outcome(decision, self.policy),
        )

    def _record_incident(self, decision: Decision, from_rung: int,
                         at: datetime | None = None, *, advised: bool = False) -> None:
        worst = decision.findings[0] if decision.findings else None
        incident = self._incident(decision, from_rung, worst, str(decision.action), at)
        if worst is not None:
            self._noted.add((worst.run_id, worst.kind))
        if advised:           # "would have done X because Y"; no rung moved, no transition
            why = self.cannot(decision)
            head = "advise mode, not done: " if why is None else f"not done ({why}): "
            self.recorder.incident(dataclasses.replace(
                incident, action=would(decision.action),
                explanation=f"{head}{incident.explanation}",
                outcome=f"would have: {incident.outcome}"), None, decision.findings)
            return
        transition = None
        if decision.action in (Action.STEP_DOWN, Action.KILL_NOW, Action.STEP_UP) \
                and decision.rung != from_rung:
            if decision.operator:
                actor = "operator"
            elif worst is not None and decision.action is not Action.STEP_UP:
                actor = f"guard:{worst.guard}"
            else:
                actor = "schedule"
            transition = Transition(
                at=incident.started_at, from_mode=self.policy.modes[from_rung].name,
                to_mode=self.policy.modes[decision.rung].name, from_rung=from_rung,
                to_rung=decision.rung, reason=decision.explanation, actor=actor)
        self.recorder.incident(incident, transition, decision.findings)


def _log_tail(run: EngineRun | None) -> str | None:
    """The last LOG_TAIL_LINES lines the engine wrote, caught up to now (the new lines
    stay for the tick's classifier: ``LogTail.catch_up``)."""
    if run is None or run.log_tail is None:
        return None
    run.log_tail.catch_up()
    lines = run.log_tail.text().splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _with_stacks(explanation: str, findings: list[dict[str, Any]], run: EngineRun | None,
                 worst: Finding | None) -> str:
    """Hand the run's stacks read before the kill (if any) to the incident about them:
    the whole dump into the finding's ``evidence["stacks"]``, one line of it appended to
    the explanation (so the alert carries it). Returns the explanation."""
    if run is None or run.stacks is None or worst is None \
            or worst.kind not in STACK_EVIDENCE_KINDS or worst.run_id not in (None, run.run_id):
        return explanation
    stacks, run.stacks = run.stacks, None
    for f in findings:
        if f.get("kind") == worst.kind:
            f["evidence"] = {**(f.get("evidence") or {}), "stacks": stacks.to_evidence()}
            break
    return f"{explanation}; {stacks.excerpt()}"


def _outcome(decision: Decision, policy: Policy) -> str:
    mode = policy.modes[decision.rung].name
    match decision.action:
        case Action.RESTART:
            return f"restart of mode {mode} in {decision.delay_seconds:g} s"
        case Action.STEP_DOWN:
            return f"stepped down to mode {mode}"
        case Action.PLANNED_RESTART:
            worst = decision.findings[0] if decision.findings else None
            why = f"planned: {worst.kind}" if worst is not None else "planned"
            return f"restarted in mode {mode} ({why})"
        case Action.KILL_NOW:
            return f"engine killed; starting mode {mode}"
        case Action.STEP_UP:
            return f"stepped up to mode {mode} (probation)"
        case Action.SHED:
            return "gateway limits lowered" if decision.shed else "gateway limits restored"
        case Action.RELOAD:
            return f"engine restarted with mode {mode}'s new arguments"
        case Action.GIVE_UP:
            return "gave up: service exits 1"
        case Action.REBOOT_REQUIRED:
            worst = decision.findings[0] if decision.findings else None
            action = worst.recommended_action if worst is not None else "RESTART_BM"
            return f"engine killed and held: reboot required (recommended action {action})"
    return str(decision.action)


def _now() -> datetime:
    return datetime.now(UTC)

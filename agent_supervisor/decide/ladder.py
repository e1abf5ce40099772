"""The mode ladder's state and how a Decision moves it. Pure: no I/O, no clock reads.

Every change of the ladder goes through here: ``advance`` for a Decision, ``operate``
and ``apply_operator`` for the operator's levers and a policy reload (``reloaded``). The
live service and the replay of its trace share them, so the two cannot diverge.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Severity
from agent_supervisor.policy.model import Policy, build_argv
from agent_supervisor.policy.sections import Restart
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample

__all__ = ["LEVERS", "LadderState", "advance", "apply_operator", "begin_probation",
           "in_step_up_hours", "operate", "pause", "pin", "recent_crashes", "reloaded",
           "request", "restart", "restart_delay", "resume", "serving_since", "start_on",
           "unpin"]

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class LadderState:
    """Where the service stands on the ladder. Times are monotonic seconds.

    ``crash_times_s``: crashes of the current rung still inside the start-limit interval.
    ``handled_run_id``: the last engine run whose crash (or emergency) was acted on; a
    run is acted on once, however many ticks still show it. ``start_not_before_s``:
    earliest start of the next engine (restart backoff). ``transitions_s``: rung changes
    in the last hour. ``probation_until_s``: end of the probation of a rung reached by
    stepping up, counted from when its engine first served (``probation_pending_since_s``
    until then). ``failing``: (rung, retry_after_s, backoff_s) of rungs that failed their
    probation. ``last_trouble_s``: last time a warning or worse was found.
    ``deferred_since_s``: since when a step down waits for a calm moment. ``pinned`` and
    ``paused``: operator overrides.
    """

    rung: int
    since_s: float = 0.0
    crash_times_s: tuple[float, ...] = ()
    handled_run_id: str | None = None
    start_not_before_s: float = 0.0
    gave_up: bool = False
    last_change_s: float | None = None
    transitions_s: tuple[float, ...] = ()
    probation_until_s: float | None = None
    failing: tuple[tuple[int, float, float], ...] = ()
    last_trouble_s: float | None = None
    shed: bool = False
    shed_since_s: float | None = None
    shed_kind: str | None = None
    """The finding kind that asked for the shed (a suspected hang's shed ends with the
    canary's answer)."""
    last_sheds_s: tuple[tuple[str, float], ...] = ()
    """(finding kind, time) of the last shed each kind asked for on the current rung
    (a storm that returns after its shed was restored steps down); cleared when the rung
    changes."""
    deferred_since_s: float | None = None
    pinned: int | None = None
    paused: bool = False
    requested: int | None = None
    """A one-shot operator move (step up/down): taken once, then the ladder is free."""
    lottery_restarts: int = 0
    """Restarts of the current rung for a bad launch (the launch lottery); reset when the
    rung changes."""
    reload_pending: bool = False
    """The policy was reloaded and the running engine's arguments are no longer its mode's."""
    start_args: tuple[tuple[str, Any], ...] = ()
    """Start-up fallback flags in effect for the current rung (cleared when it changes)."""
    fallbacks_tried: tuple[int, ...] = ()
    """Indexes of the current rung's ``startup_fallbacks`` already tried (each once)."""
    reboot_required: str | None = None
    """The finding kind that said the box needs a reboot; the ladder holds while set."""
    start_budgets: tuple[tuple[str, float], ...] = ()
    """(mode, seconds): the start budget learned from the record's past successful starts."""

    def start_budget(self, mode: str) -> float | None:
        """The learned start budget of ``mode``, or None."""
        return next((b for m, b in self.start_budgets if m == mode), None)
    restart_requested: bool = False
    """The operator asked for a restart of the current mode (drain, stop, start)."""
    stepped_up: bool = False
    """The current rung was reached by stepping up (kept through restarts on it, cleared
    by any other rung change): a crash with a speculative signature bars it (issue 29)."""
    probation_pending_since_s: float | None = None
    """Stepped up at this time, the new engine not serving yet: the probation starts when
    it serves (``serving_since``), not at the step up, or a cold start of minutes (5-17 on
    a Spark) would eat it (issue 29). The rung counts as on probation meanwhile."""

    top: int = 0
    """The highest rung the ladder climbs back to: the first, or the mode the traffic
    chose for the top (``Decision.top_rung``; ``decide/top_switch.py``, issue 32)."""

    start_failures: tuple[tuple[str, float], ...] = ()
    """(signature, time) of the current rung's failed starts judged by class: the same
    signature twice is not launched a third time (issue 29); cleared when the rung changes
    or the operator resumes."""

    def failed_before(self, signature: str, now_s: float, interval_s: float) -> bool:
        """Whether a start of this rung already failed with ``signature`` within
        ``interval_s`` (the start limit's interval)."""
        return any(s == signature and now_s - t <= interval_s for s, t in self.start_failures)

    def in_probation(self, now_s: float) -> bool:
        """Stepped up and not serving yet, or serving for less than the probation."""
        return self.probation_pending_since_s is not None or (
            self.probation_until_s is not None and now_s < self.probation_until_s)

    def probation_left(self, now_s: float, probation_seconds: float) -> float | None:
        """Seconds of probation left (all of it while the new engine is not serving yet);
        None when the rung is not on probation."""
        if self.probation_pending_since_s is not None:
            return probation_seconds
        if self.probation_until_s is None or self.probation_until_s <= now_s:
            return None
        return self.probation_until_s - now_s

    @classmethod
    def initial(cls, policy: Policy, now_s: float = 0.0) -> LadderState:
        """A fresh service: the policy's initial rung, start due now, calm counted from now."""
        return cls(rung=policy.initial_rung, since_s=now_s)

    def failing_until(self, rung: int) -> float | None:
        """Until when ``rung`` is barred after failing its probation, or None."""
        for r, retry_after, _ in self.failing:
            if r == rung:
                return retry_after
        return None

    def last_shed(self, kind: str) -> float | None:
        """When ``kind`` last asked for a shed on this rung (monotonic s), or None."""
        return next((t for k, t in self.last_sheds_s if k == kind), None)

    def calm_for(self, now_s: float) -> float:
        """Seconds since the last warning, rung change or service start, whichever is last."""
        marks = [self.since_s, self.last_trouble_s or 0.0, self.last_change_s or 0.0]
        return now_s - max(marks)


def restart_delay(restart: Restart, crashes_in_window: int) -> float:
    """Seconds to wait before restarting after the ``crashes_in_window``-th crash (1-based).

    The first restart waits ``restart_delay_seconds`` and each further crash within the
    interval doubles it (0 s: then 1, 2, 4 s ...), capped at
    ``restart_delay_max_seconds`` (systemd's RestartSec=/RestartMaxDelaySec=).
    """
    base = restart.restart_delay_seconds
    if crashes_in_window <= 1:
        return base
    if base > 0:                        # base, 2 base, 4 base, ...
        return min(restart.restart_delay_max_seconds, base * 2.0 ** (crashes_in_window - 1))
    return min(restart.restart_delay_max_seconds, 2.0 ** (crashes_in_window - 2))  # 0, 1, 2 ..


def recent_crashes(ladder: LadderState, policy: Policy, now_s: float) -> tuple[float, ...]:
    """Crash times of the current rung still inside ``start_limit_interval_seconds``."""
    interval = policy.restart.start_limit_interval_seconds
    return tuple(t for t in ladder.crash_times_s if now_s - t <= interval)


def _mark_failing(ladder: LadderState, rung: int, policy: Policy,
                  now_s: float) -> tuple[tuple[int, float, float], ...]:
    hy = policy.hysteresis
    previous = next((b for r, _, b in ladder.failing if r == rung), None)
    backoff = (hy.failed_rung_backoff_seconds if previous is None
               else min(hy.failed_rung_backoff_max_seconds, previous * 2))
    kept = tuple(f for f in ladder.failing if f[0] != rung)
    return (*kept, (rung, now_s + backoff, backoff))


def in_step_up_hours(policy: Policy, wall_s: float | None) -> bool:
    """Whether ``wall_s`` (UTC epoch seconds: the sample's clock) falls in the policy's
    ``step_up_windows`` (always without windows; never without a clock)."""
    hy = policy.hysteresis
    if not hy.step_up_windows:
        return True
    if wall_s is None:
        return False
    local = datetime.fromtimestamp(wall_s, UTC).astimezone(ZoneInfo(hy.timezone))
    minute = local.hour * 60 + local.minute
    return any(w.contains(minute) for w in hy.step_up_windows)


def serving_since(ladder: LadderState, sample: Sample | None) -> float | None:
    """When the engine of a rung reached by stepping up began serving, if ``sample`` shows
    it (ready on that rung since the step up); None otherwise or when no probation waits."""
    pending = ladder.probation_pending_since_s
    if pending is None or sample is None or sample.engine_state is not EngineState.READY:
        return None
    if sample.engine_rung is not None and sample.engine_rung != ladder.rung:
        return None
    since = sample.engine_state_since_s if sample.engine_state_since_s is not None \
        else sample.t_s
    return since if since >= pending else None


def begin_probation(ladder: LadderState, serving_s: float | None,
                    policy: Policy) -> LadderState:
    """The probation of a stepped-up rung, from ``serving_s`` (its engine's first serving;
    None: not yet, the ladder unchanged)."""
    if ladder.probation_pending_since_s is None or serving_s is None:
        return ladder
    return dataclasses.replace(ladder, probation_pending_since_s=None,
                               probation_until_s=serving_s + policy.hysteresis.probation_seconds)


def _failed_start(ladder: LadderState, decision: Decision, now_s: float) -> LadderState:
    """``ladder`` with the decision's failed-start signature noted (issue 29)."""
    if decision.start_signature is None:
        return ladder
    return dataclasses.replace(ladder, start_failures=(*ladder.start_failures,
                                                       (decision.start_signature, now_s)))


def advance(ladder: LadderState, decision: Decision, policy: Policy, now_s: float) -> LadderState:
    """The ladder after ``decision`` is carried out at ``now_s``.

    Every decision updates the trouble mark (a warning or worse seen, unless it is a
    standing fact such as ``telemetry_degraded``) and the deferral of
    a when-calm step down. RESTART records the crash (not a box fault) and the backoff;
    STEP_DOWN, KILL_NOW, STEP_UP move the rung (STEP_UP on probation; PLANNED_RESTART
    stays on it, counting a launch-lottery restart); SHED flips the
    gateway lever; GIVE_UP marks the ladder exhausted. A decision that saw the stepped-up
    rung's engine serve (``probation_from_s``) starts its probation; one with
    ``top_rung`` moves the top (issue 32)."""
    rep = dataclasses.replace
    ladder = _failed_start(begin_probation(ladder, decision.probation_from_s, policy),
                           decision, now_s)
    if decision.top_rung is not None:
        ladder = rep(ladder, top=decision.top_rung)
    trouble = any(f.severity.rank >= Severity.WARNING.rank and not f.standing
                  for f in decision.findings)
    waiting = any(f.response in ("skip_speculation_when_calm", "restart_when_calm")
                  for f in decision.findings)
    ladder = rep(ladder,
                 last_trouble_s=now_s if trouble else ladder.last_trouble_s,
                 deferred_since_s=(ladder.deferred_since_s or now_s) if waiting else None)
    recent_transitions = tuple(t for t in ladder.transitions_s if now_s - t < HOUR)
    match decision.action:
        case Action.RESTART if decision.fallback is not None:
            # A corrective retry: bounded by the mode's fallbacks, not a crash to count.
            return rep(ladder, handled_run_id=decision.run_id, start_args=decision.start_args,
                       fallbacks_tried=(*ladder.fallbacks_tried, decision.fallback),
                       start_not_before_s=now_s + decision.delay_seconds)
        case Action.REBOOT_REQUIRED:
            kind = decision.findings[0].kind if decision.findings else "reboot_required"
            return rep(ladder, reboot_required=kind,
                       handled_run_id=decision.run_id or ladder.handled_run_id)
        case Action.RESTART:
            return rep(ladder, crash_times_s=(*recent_crashes(ladder, policy, now_s),
                                              *(() if decision.box_fault else (now_s,))),
                       handled_run_id=decision.run_id,
                       start_not_before_s=now_s + decision.delay_seconds)
        case Action.KILL_NOW if decision.rung == ladder.rung:
            return rep(ladder, crash_times_s=(*recent_crashes(ladder, policy, now_s), now_s),
                       handled_run_id=decision.run_id or ladder.handled_run_id,
                       start_not_before_s=now_s + decision.delay_seconds)
        case Action.STEP_DOWN | Action.KILL_NOW | Action.STEP_UP | Action.PLANNED_RESTART:
            return _moved(ladder, decision, policy, now_s, recent_transitions)
        case Action.SHED:
            kinds = [f.kind for f in decision.findings if f.response in (
                "shed", "shed_first", "shed_first_fewer_sequences")]
            sheds = ladder.last_sheds_s
            if decision.shed:
                sheds = (*((k, t) for k, t in sheds if k not in kinds),
                         *((k, now_s) for k in dict.fromkeys(kinds)))
            return rep(ladder, shed=bool(decision.shed),
                       shed_since_s=now_s if decision.shed else None,
                       shed_kind=kinds[0] if decision.shed and kinds else None,
                       last_sheds_s=sheds)
        case Action.RELOAD | Action.START:
            return rep(ladder, reload_pending=False, restart_requested=False)
        case Action.GIVE_UP:
            return rep(ladder, gave_up=True, handled_run_id=decision.run_id)
        case _:
            return ladder


def _moved(ladder: LadderState, decision: Decision, policy: Policy, now_s: float,
           recent_transitions: tuple[float, ...]) -> LadderState:
    """STEP_DOWN, KILL_NOW (one rung down) and STEP_UP: the new rung (the same one for a
    relaunch or a planned restart), a probation after a step up."""
    failing = ladder.failing
    if decision.marks_failing is not None:
        failing = _mark_failing(ladder, decision.marks_failing, policy, now_s)
    moved = decision.rung != ladder.rung
    up = decision.action is Action.STEP_UP
    lottery = any(f.kind == "spec_launch_lottery" for f in decision.findings)
    return dataclasses.replace(
        ladder, rung=decision.rung, crash_times_s=() if moved else ladder.crash_times_s,
        lottery_restarts=0 if moved else ladder.lottery_restarts + int(lottery),
        requested=None if ladder.requested == decision.rung else ladder.requested,
        handled_run_id=decision.run_id or ladder.handled_run_id,
        start_not_before_s=now_s + decision.delay_seconds,
        last_change_s=now_s if moved else ladder.last_change_s,
        transitions_s=(*recent_transitions, now_s) if moved else recent_transitions,
        probation_until_s=None, failing=failing, shed=False, shed_since_s=None,
        probation_pending_since_s=now_s if up else (
            None if moved else ladder.probation_pending_since_s),
        stepped_up=up or (ladder.stepped_up and not moved),
        shed_kind=None, deferred_since_s=None,
        last_sheds_s=() if moved else ladder.last_sheds_s,
        start_args=() if moved else ladder.start_args,
        fallbacks_tried=() if moved else ladder.fallbacks_tried,
        start_failures=() if moved else ladder.start_failures)


def pin(ladder: LadderState, rung: int) -> LadderState:
    """Operator: keep the engine on ``rung``; automatic steps stop (emergencies still act)."""
    return dataclasses.replace(ladder, pinned=rung)


def unpin(ladder: LadderState) -> LadderState:
    """Operator: let the ladder move on its own again."""
    return dataclasses.replace(ladder, pinned=None)


def request(ladder: LadderState, rung: int) -> LadderState:
    """Operator: move to ``rung`` once (step up or down), then let the ladder move again."""
    return dataclasses.replace(ladder, requested=rung)


def restart(ladder: LadderState) -> LadderState:
    """Operator: drain and restart the engine in the current mode, once."""
    return dataclasses.replace(ladder, restart_requested=True)


def pause(ladder: LadderState) -> LadderState:
    """Operator: stop automatic graceful steps (crash restarts and emergencies still act)."""
    return dataclasses.replace(ladder, paused=True)


def resume(ladder: LadderState) -> LadderState:
    """Operator: undo ``pause``; a gave-up ladder is also given another try, and a
    reboot-required hold is lifted (the operator says the box is fine)."""
    return dataclasses.replace(ladder, paused=False, gave_up=False, crash_times_s=(),
                               reboot_required=None, start_failures=())


def with_start_budgets(ladder: LadderState,
                       budgets: tuple[tuple[str, float], ...]) -> LadderState:
    """The learned start budget of each mode (``agent_supervisor.decide.lifecycle``)."""
    return dataclasses.replace(ladder, start_budgets=budgets)


def start_on(ladder: LadderState, rung: int, trouble_s: float | None = None) -> LadderState:
    """Start-up: begin on ``rung`` (an adopted engine's, or the one chosen after a host
    reset); ``trouble_s`` (monotonic) counts as the last trouble, so the ladder waits its
    calm before stepping up again."""
    if trouble_s is None:
        return dataclasses.replace(ladder, rung=rung)
    return dataclasses.replace(ladder, rung=rung, last_trouble_s=trouble_s)


#: The operator's levers, as the admin API and the trace name them.
LEVERS = ("pin", "unpin", "step-down", "step-up", "pause", "resume", "restart")


def operate(ladder: LadderState, policy: Policy, lever: str,
            mode: str | None = None) -> tuple[LadderState, str, int | None]:
    """Pull an operator lever: ``pin`` (to ``mode``), ``unpin``, ``step-down``, ``step-up``
    (one rung, once), ``pause``, ``resume``, ``restart`` (drain and restart the current
    mode, once).

    Returns (new state, the trace's name of the action, its rung or None). The trace
    names a step ``step`` with its target rung, so ``apply_operator`` replays it.
    Raises KeyError for an unknown mode, ValueError for an unknown lever or a step off
    either end of the ladder.
    """
    match lever:
        case "pin":
            rung = policy.mode_index(mode or "")
            return pin(ladder, rung), "pin", rung
        case "step-down" | "step-up":
            rung = ladder.rung + (1 if lever == "step-down" else -1)
            if not 0 <= rung < len(policy.modes):
                raise ValueError(f"no rung {lever.split('-')[1]} of "
                                 f"{policy.modes[ladder.rung].name}")
            return request(ladder, rung), "step", rung
        case "unpin" | "pause" | "resume" | "restart":
            return apply_operator(ladder, lever, None), lever, None
    raise ValueError(f"unknown operator action {lever!r}")


def apply_operator(ladder: LadderState, action: str, rung: int | None,
                   **extra: object) -> LadderState:
    """One operator record (``operate``'s action and rung, or a policy ``reload``) applied
    to ``ladder``: the live service and the replay of its trace both go through here.

    ``reload`` takes ``extra``: ``reload_pending`` (bool), ``pinned``, ``requested`` and
    ``top`` (rungs in the new ladder, or None; a top gone: the first), as ``reloaded``
    computed them. An unknown action
    leaves the ladder as it is (a newer trace read by an older replay).
    """
    match action:
        case "pin" if rung is not None:
            return pin(ladder, rung)
        case "unpin":
            return unpin(ladder)
        case "pause":
            return pause(ladder)
        case "resume":
            return resume(ladder)
        case "restart":
            return restart(ladder)
        case "step" if rung is not None:
            return request(ladder, rung)
        case "reload" if rung is not None:
            pinned, requested = extra.get("pinned", ladder.pinned), extra.get(
                "requested", ladder.requested)
            top = extra.get("top", ladder.top)
            return dataclasses.replace(
                ladder, rung=rung, reload_pending=bool(extra.get("reload_pending")),
                pinned=pinned if isinstance(pinned, int) else None,
                requested=requested if isinstance(requested, int) else None,
                top=top if isinstance(top, int) else 0)
    return ladder


def reloaded(ladder: LadderState, old: Policy, new: Policy) -> tuple[int, dict[str, object]]:
    """Where a policy reload puts the ladder: (rung in ``new``, the ``reload`` extras for
    ``apply_operator``). Rungs are carried over by mode name (a mode gone from the new
    ladder: the new initial rung; a pin or a request to it is dropped, a top to it is the
    first rung again).
    ``reload_pending``: the running mode's engine arguments, environment or working
    directory changed, so the engine must be drained and restarted (Action.RELOAD).
    """
    names = [m.name for m in new.modes]
    old_mode = old.modes[ladder.rung]
    rung = names.index(old_mode.name) if old_mode.name in names else new.initial_rung
    changed = (old_mode.name not in names
               or build_argv(old, old_mode) != build_argv(new, new.modes[rung])
               or old.engine.environment != new.engine.environment
               or old.working_directory != new.working_directory)

    def remap(r: int | None) -> int | None:
        name = None if r is None else old.modes[r].name
        return names.index(name) if name in names else None

    return rung, {"reload_pending": changed, "pinned": remap(ladder.pinned),
                  "requested": remap(ladder.requested), "top": remap(ladder.top) or 0}

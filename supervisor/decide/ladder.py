"""The mode ladder's state and how a Decision moves it. Pure: no I/O, no clock reads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from supervisor.decide.decision import Action, Decision
from supervisor.policy import Policy, Restart

__all__ = ["LadderState", "advance", "restart_delay"]


@dataclass(frozen=True, slots=True)
class LadderState:
    """Where the service stands on the ladder. Times are monotonic seconds.

    ``crash_times_s``: crashes of the current rung still inside the start-limit interval.
    ``handled_run_id``: the last crashed engine run already acted on (a crash is acted
    on once, however many ticks still show it). ``start_not_before_s``: earliest time
    the next start may begin (restart backoff). ``gave_up``: the last rung exhausted its
    start limit.
    """

    rung: int
    crash_times_s: tuple[float, ...] = ()
    handled_run_id: str | None = None
    start_not_before_s: float = 0.0
    gave_up: bool = False
    last_change_s: float | None = None

    @classmethod
    def initial(cls, policy: Policy) -> LadderState:
        """The state a fresh service starts in: the policy's initial rung, start due now."""
        return cls(rung=policy.initial_rung)


def restart_delay(restart: Restart, crashes_in_window: int) -> float:
    """Seconds to wait before restarting after the ``crashes_in_window``-th crash (1-based).

    The first restart waits ``restart_delay_seconds``; each further crash within the
    interval doubles the wait (from 1 s if the first delay is 0), capped at
    ``restart_delay_max_seconds`` (systemd's RestartSec=/RestartMaxDelaySec=).
    """
    base = restart.restart_delay_seconds
    if crashes_in_window <= 1:
        return base
    first = base if base > 0 else 1.0
    return min(restart.restart_delay_max_seconds, first * 2.0 ** (crashes_in_window - 2))


def recent_crashes(ladder: LadderState, policy: Policy, now_s: float) -> tuple[float, ...]:
    """Crash times of the current rung still inside ``start_limit_interval_seconds``."""
    interval = policy.restart.start_limit_interval_seconds
    return tuple(t for t in ladder.crash_times_s if now_s - t <= interval)


def advance(ladder: LadderState, decision: Decision, policy: Policy, now_s: float) -> LadderState:
    """The ladder after ``decision`` is carried out at ``now_s``.

    RESTART records the crash and the backoff; STEP_DOWN moves to the new rung with a
    clean crash record; GIVE_UP marks the ladder exhausted; START and HOLD change nothing.
    """
    replace = dataclasses.replace
    match decision.action:
        case Action.RESTART:
            return replace(
                ladder,
                crash_times_s=(*recent_crashes(ladder, policy, now_s), now_s),
                handled_run_id=decision.run_id,
                start_not_before_s=now_s + decision.delay_seconds,
            )
        case Action.STEP_DOWN:
            return replace(
                ladder, rung=decision.rung, crash_times_s=(), handled_run_id=decision.run_id,
                start_not_before_s=now_s + decision.delay_seconds, last_change_s=now_s,
            )
        case Action.GIVE_UP:
            return replace(ladder, gave_up=True, handled_run_id=decision.run_id)
        case _:
            return ladder

"""Advisory mode (issue 31 item 1): which decisions turn into effects. Pure.

Under ``mode: advise`` (the policy, ``supervisor run --advise``, or the ``advise`` lever)
the service senses, decides, records and alerts as ever, but the executor carries out
only the first launch of the engine (the supervisor is its launcher) and the operator's
own levers (``supervisor restart``, ``step``, ``pin``: the operator acting, recorded as
such, and the launch that completes them): every other
decision that is not HOLD (restart, step, kill, shed, reload, give up, reboot required)
is recorded as what it would have done, an incident whose action is ``would_<action>``,
with the same evidence, and nothing happens. The ladder moves as for a HOLD (trouble
and deferral marks only), so a crash or hang that was only advised on stays unhandled:
once the ``act`` lever is pulled the next decision carries out what the situation calls
for (a crashed engine is cleared and restarted, a hung one killed and restarted).

A decision repeated tick after tick (the crashed engine is still crashed) is recorded
once: ``AdviceLog`` records advice again only after ``REPEAT_SECONDS`` without it.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from agent_supervisor.decide.decision import Action, Decision, as_held

__all__ = ["ACT", "ADVISE", "REPEAT_SECONDS", "WOULD", "AdviceLog", "SupervisionMode", "advice_key",
           "as_held", "carried_out", "would"]

SupervisionMode = Literal["act", "advise"]
ACT: SupervisionMode = "act"
ADVISE: SupervisionMode = "advise"
#: The prefix of an advisory incident's action (``would_restart``).
WOULD = "would_"


def carried_out(decision: Decision, *, advising: bool, launched: bool) -> bool:
    """Whether ``decision`` turns into effects (True) or is only recorded as advice.

    Acting: always. Advising: a HOLD (nothing to do); the START that launches the engine
    when none of this life runs (``launched`` False: no run yet, or the last one was
    stopped on purpose, which while advising only an operator's lever does); and an
    operator's lever (``decision.operator``: a pin, a step, a restart the operator asked
    for): the operator acting, not the supervisor. A START after the engine went down
    by itself is advice, as is every other action."""
    if not advising or decision.action is Action.HOLD or decision.operator:
        return True
    return decision.action is Action.START and not launched


def would(action: Action | str) -> str:
    """The recorded action of an advised decision: ``would_restart``."""
    return f"{WOULD}{action}"


def advice_key(decision: Decision) -> tuple[str, int, str | None, str | None]:
    """What makes two advised decisions the same advice: action, target rung, run and
    the worst finding's kind."""
    worst = decision.findings[0].kind if decision.findings else None
    return (str(decision.action), decision.rung, decision.run_id, worst)


#: The same advice again within this long of the last time it was decided is not
#: recorded again (a crashed engine is decided on every tick; a hang's verdict comes and
#: goes with each canary): seconds.
REPEAT_SECONDS = 300.0


@dataclasses.dataclass
class AdviceLog:
    """The advice given lately: each recorded once while it keeps being decided.

    ``seen``: the monotonic time each piece of advice was last decided."""

    seen: dict[tuple[str, int, str | None, str | None], float] = dataclasses.field(
        default_factory=dict)
    repeat_seconds: float = REPEAT_SECONDS

    def first(self, decision: Decision, now_s: float) -> bool:
        """Whether ``decision`` is new advice at ``now_s``: never given, or not decided
        for ``repeat_seconds``. Either way it counts as decided now."""
        key = advice_key(decision)
        last = self.seen.get(key)
        self.seen[key] = now_s
        return last is None or now_s - last > self.repeat_seconds

    def clear(self) -> None:
        """An action was carried out (the service acts again): advice starts afresh."""
        self.seen.clear()

"""The top rung chosen by the traffic, live: ``choose_top_rung`` wired into the ladder. Pure.

``decide/top_rung.py`` says which mode should be the top of the ladder now; this module
turns its ``switch`` into the ladder's move (issue 32 item 2, the live part):

1. ``top_figures``: what the choice reads, for a policy with ``top_rung.enabled``: the
   database's calibration (``record.baselines.load_top_rung_figures``) over the policy's
   own ``top_rung.figures`` (mode by mode: a mode the database measured is read from
   there), restricted to ``top_rung.modes`` (empty: every mode with figures). None when
   the choice is off or no candidate has figures.
2. ``live_choice``: one tick of ``choose_top_rung``, its state carried by the caller as
   the ladder's is (``runtime/top_rung.py``), aligned with the ladder's top
   (``LadderState.top``) and the engine's running mode (the sample's rung).
3. ``top_decision``: ``decide()``'s step 5b, after the operator's pin and before the
   climb: a ``switch`` whose target is not the ladder's top becomes a decision carrying
   ``top_rung``. Engine on the old top (or above the new one): drain and restart into the
   new top, STEP_UP when it is higher on the ladder (on probation, as any step up) and
   STEP_DOWN when lower. Engine below both (stepped down for safety): a HOLD that only
   moves the top, where the climb (step 6) will stop. Everything above it wins: a
   crash, an emergency, a warning's step down, a stopped or starting engine, a reload,
   the pin; and it waits out the probation of a stepped-up rung, a barred target, the
   cooldown and the transitions per hour (``decide()``'s ``_blocked``). The finding
   ``top_rung`` (info) carries the choice's evidence: the incident reads "code share
   70%, fast accepts 0.62 at position 0, predicted +38% tokens/s per request with
   fast for 40 min, switch costs 35 s".
4. ``settle``: the state the next tick starts from: the choice's, when the decision
   carried its switch out (the switch counted against ``max_switches_per_hour``), else
   the state before it with the new mix (the switch is asked for again next tick, and
   not counted).
"""

from __future__ import annotations

import dataclasses

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Finding, Severity
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.decide.top_rung import (
    TopRungChoice,
    TopRungFigures,
    TopRungState,
    choose_top_rung,
)
from agent_supervisor.policy.model import Policy
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.window import Window

__all__ = ["TOP_KIND", "live_choice", "settle", "top_decision", "top_figures"]

#: The finding (and incident) kind of a switch of the top rung.
TOP_KIND = "top_rung"


def top_figures(policy: Policy, stored: TopRungFigures | None) -> TopRungFigures | None:
    """The figures the live choice reads (module doc, step 1), or None when
    ``top_rung.enabled`` is off or no candidate mode has tokens/s figures."""
    spec = policy.top_rung
    if not spec.enabled:
        return None
    own = spec.figures
    rates = {m: {p: [tuple(pt) for pt in pts] for p, pts in per.items()}
             for m, per in (own.tokens_per_second if own else {}).items()}
    accept = {m: dict(per) for m, per in (own.acceptance if own else {}).items()}
    starts = dict(own.start_seconds) if own else {}
    if stored is not None:
        rates.update({m: {p: list(v) for p, v in per.items()}
                      for m, per in stored.tokens_per_second.items()})
        accept.update({m: dict(per) for m, per in stored.acceptance.items()})
        starts.update(stored.start_seconds)
    names = {m.name for m in policy.modes}
    allowed = set(spec.modes) if spec.modes else names
    rates = {m: per for m, per in rates.items() if m in allowed and m in names and per}
    if not rates:
        return None
    return TopRungFigures(
        tokens_per_second={m: {p: tuple((float(c), float(r)) for c, r in pts)
                               for p, pts in per.items()} for m, per in rates.items()},
        acceptance=accept, start_seconds=starts)


def live_choice(state: TopRungState | None, window: Window, ladder: LadderState,
                policy: Policy, figures: TopRungFigures,
                now_s: float) -> tuple[TopRungState, TopRungState, TopRungChoice]:
    """One tick of the choice (module doc, step 2). ``state``: the last ``settle``d state
    (None at first). Returns (the state before the choice, aligned with the ladder's
    top; the choice's new state; the choice), for ``settle``."""
    names = [m.name for m in policy.modes]
    top = names[min(ladder.top, len(names) - 1)]
    if state is None:
        state = TopRungState(top=top)
    elif state.top != top:            # a reload moved the top: a candidate starts over
        state = dataclasses.replace(state, top=top, candidate=None, candidate_since_s=None)
    s = window.latest
    rung = s.engine_rung if s is not None and s.engine_rung is not None else ladder.rung
    running = names[rung] if 0 <= rung < len(names) else top
    after, choice = choose_top_rung(state, window, running, figures, policy.top_rung, now_s)
    return state, after, choice


def settle(before: TopRungState, after: TopRungState, choice: TopRungChoice,
           decision: Decision | None, policy: Policy) -> TopRungState:
    """The state the next tick starts from (module doc, step 4). ``decision``: the one
    carried out this tick (None: none was)."""
    if choice.action != "switch":
        return after
    names = [m.name for m in policy.modes]
    taken = decision is not None and decision.top_rung is not None \
        and 0 <= decision.top_rung < len(names) and names[decision.top_rung] == choice.target
    return after if taken else dataclasses.replace(before, mix=after.mix)


def top_decision(sit: Situation, findings: list[Finding],
                 choice: TopRungChoice | None) -> Decision | None:
    """``decide()``'s step 5b (module doc, step 3), or None. The caller has checked the
    cooldown and the transitions per hour."""
    if choice is None or choice.action != "switch" or choice.target is None:
        return None
    ladder, policy, now = sit.ladder, sit.policy, sit.now_s
    names = [m.name for m in policy.modes]
    s = sit.latest
    if choice.target not in names or ladder.paused or ladder.pinned is not None \
            or s is None or s.engine_state is not EngineState.READY \
            or ladder.in_probation(now):
        return None
    target = names.index(choice.target)
    barred = ladder.failing_until(target)
    if target == ladder.top or (barred is not None and now < barred):
        return None
    old = names[min(ladder.top, len(names) - 1)]
    found = (Finding("top_rung", TOP_KIND, Severity.INFO, choice.why,
                     evidence={**choice.evidence, "from_top": old, "to_top": choice.target}),
             *findings)
    head = f"top rung {old} -> {choice.target} (the traffic): {choice.why}"
    if ladder.rung <= ladder.top or target > ladder.rung:
        action = Action.STEP_UP if target < ladder.rung else Action.STEP_DOWN
        return Decision(action, target, f"{head} -> drain and restart in {choice.target}",
                        found, top_rung=target)
    return Decision(Action.HOLD, ladder.rung, f"{head}; the engine stays on "
                    f"{names[ladder.rung]} (below both) and climbs back to {choice.target}",
                    found, top_rung=target)

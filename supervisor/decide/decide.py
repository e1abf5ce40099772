"""``decide()``: the one function that picks what the service does. Pure.

Window, ladder state, policy and the current monotonic time in; one Decision out. No
I/O, no logging, no clock reads: the same call runs live and in replay.
"""

from __future__ import annotations

import dataclasses

from supervisor.decide.decision import Action, Decision
from supervisor.decide.findings import Finding
from supervisor.decide.guards import engine_dead
from supervisor.decide.ladder import LadderState, recent_crashes, restart_delay
from supervisor.decide.window import Window
from supervisor.policy import Policy
from supervisor.states import EngineState

__all__ = ["decide"]


def decide(window: Window, ladder: LadderState, policy: Policy, now_s: float) -> Decision:
    """Pick at most one action for this tick.

    Order: nothing sampled -> HOLD; ladder exhausted -> HOLD; a new crash -> RESTART,
    STEP_DOWN or GIVE_UP by the start limit; engine stopped and start due -> START;
    otherwise HOLD. The explanation names the evidence and the thresholds applied.
    """
    s = window.latest
    mode = policy.modes[ladder.rung].name
    if s is None:
        return Decision(Action.HOLD, ladder.rung, "no sample yet")
    if ladder.gave_up:
        return Decision(Action.HOLD, ladder.rung, f"gave up: mode {mode} (the last rung) "
                        "kept crashing")
    findings = engine_dead.check(window, ladder, policy, now_s)
    if findings:
        return _on_crash(findings[0], ladder, policy, now_s)
    if s.engine_state is EngineState.STOPPED:
        wait = ladder.start_not_before_s - now_s
        if wait <= 0:
            return Decision(Action.START, ladder.rung, f"engine stopped: start mode {mode}")
        return Decision(Action.HOLD, ladder.rung, f"engine stopped: start of mode {mode} "
                        f"due in {wait:.1f} s (restart backoff)")
    return Decision(Action.HOLD, ladder.rung, f"engine {s.engine_state} in mode {mode}")


def _on_crash(finding: Finding, ladder: LadderState, policy: Policy, now_s: float) -> Decision:
    rst = policy.restart
    crashes = len(recent_crashes(ladder, policy, now_s)) + 1
    mode = policy.modes[ladder.rung].name
    head = (f"{finding.summary}: crash {crashes} of mode {mode} within "
            f"{rst.start_limit_interval_seconds:g} s (start_limit_burst {rst.start_limit_burst})")
    evidence = {**finding.evidence, "crashes_in_interval": crashes,
                "start_limit_burst": rst.start_limit_burst,
                "start_limit_interval_seconds": rst.start_limit_interval_seconds}
    finding = dataclasses.replace(finding, evidence=evidence)
    if crashes >= rst.start_limit_burst:
        if ladder.rung + 1 < len(policy.modes):
            nxt = policy.modes[ladder.rung + 1].name
            return Decision(Action.STEP_DOWN, ladder.rung + 1, f"{head} -> step down to {nxt}",
                            (finding,), run_id=finding.run_id)
        return Decision(Action.GIVE_UP, ladder.rung, f"{head}, and it is the last rung -> "
                        "give up", (finding,), run_id=finding.run_id)
    delay = restart_delay(rst, crashes)
    return Decision(Action.RESTART, ladder.rung, f"{head} -> restart in {delay:g} s",
                    (finding,), delay_seconds=delay, run_id=finding.run_id)

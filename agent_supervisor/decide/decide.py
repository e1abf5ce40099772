"""``decide()``: the one function that picks what the service does. Pure.

Window, ladder state, policy, the current monotonic time and the calibrated baselines
in; one Decision out. No I/O, no logging, no clock reads: the same call runs live and
in replay.

Order of precedence (DESIGN.md, "Guards"):
0. the box needs a reboot (GPU lost, memory pinned, processes stuck in the driver): kill
   what is left, hold the ladder from then on, alert; a failed start whose class a
   corrected start can fix retries with the mode's next start-up fallback (bounded per
   start); a bad argument or a missing model goes to a rung without the flag, else gives
   up; a failure no rung fixes (model files, checkpoint, driver, fabric) is launched once
   more and the same signature again gives up, a poisoned compile cache is relaunched once
   with the caches moved aside (``decide/start_failure.py``; issue 29);
1. emergency (memory floor, NV_ERR_NO_MEMORY): kill now, start one rung down;
2. critical (dead, hung, corrupted output): restart with backoff; the start limit steps
   down (a start that failed twice with the same first error line is not launched a
   third time as it was: one rung down, or give up on the last; issue 29), and in a
   speculative mode (every crash it counts ran with speculation on: crash
   times are kept per rung) to the first rung without speculation; a crash or hang with a
   speculative-decoding signature goes there at once; a hang on a huge prompt goes to the
   first rung with a context cap below it; a crash during probation steps back down and
   bars the rung, and so does a speculative-signature crash on a rung reached by stepping
   up, whenever it comes (issue 29);
3. the engine is stopped: start it when the backoff allows, memory is back (over the
   memory floor plus its margin, and what the last run took returned) and no process of
   the old group is left; a reloaded policy that
   changed the running mode's arguments: drain and restart;
4. warnings: instant levers first where one helps (shed the gateway's limits: heat,
   throttling, a preemption storm, the load budget), then a graceful step down, within
   the cooldown and the transitions-per-hour limit; a failed probation goes back at
   once; a preemption storm back soon after its shed was restored steps down to
   fewer sequences without shedding again (it sheds only while that step is held).
   Memory forecast and PSI pressure step down without shedding: fewer requests do not
   hand back memory the engine has already allocated (vLLM sizes its KV cache
   at start-up), only a restart in a smaller mode does;
   A shed for a suspected hang is undone as soon as the canary answers;
5. the operator's pin: move to the pinned rung;
5b. the traffic's top rung (``top``: issue 32, ``decide/top_switch.py``): a switch of
   the top at a calm moment, a planned restart into the new top; it waits out a
   probation, a barred target, the cooldown and the transitions per hour;
6. calm: restore shed limits, then step up one rung (calm period, allowed hours, not a
   barred rung), on probation (counted from the new engine's first serving: issue 29),
   never above the ladder's top (``LadderState.top``: the first rung, or the traffic's);
7. otherwise hold.
"""

from __future__ import annotations

import dataclasses
from functools import partial

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.decide.guards import ALL
from agent_supervisor.decide.ladder import (
    LadderState,
    begin_probation,
    in_step_up_hours,
    recent_crashes,
    restart_delay,
    serving_since,
)
from agent_supervisor.decide.recommended import RECOMMENDED, recommend
from agent_supervisor.decide.rungs import context_cap, first_capped_rung_below, skip_target
from agent_supervisor.decide.start_failure import failure_signature, repeated_start
from agent_supervisor.decide.start_failure import startup_decision as _startup
from agent_supervisor.decide.top_rung import TopRungChoice
from agent_supervisor.decide.top_switch import top_decision
from agent_supervisor.policy.model import Policy
from agent_supervisor.states import CrashReason, EngineState
from agent_supervisor.telemetry.baselines import AcceptanceBaselines, Baselines, EngineUpdate
from agent_supervisor.telemetry.window import Window

__all__ = ["context_cap", "decide", "findings_of", "first_capped_rung_below"]

HOUR = 3600.0

#: Wait before retrying a spawn that failed for want of descriptors, memory or processes
#: (CrashReason.SPAWN_RESOURCES): long enough for a connection flood or a burst of
#: memory to pass, short enough that agents held by the gateway do not time out. Not a
#: crash of the mode, so it never climbs the backoff or the start limit (issue 17).
SPAWN_RESOURCES_RETRY_SECONDS = 5.0


def findings_of(sit: Situation) -> list[Finding]:
    """Every guard's findings, worst first (stable within a severity: guard order)."""
    found = [recommend(f) for guard in ALL for f in guard.check(sit)]
    return sorted(found, key=lambda f: -f.severity.rank)


def decide(window: Window, ladder: LadderState, policy: Policy, now_s: float,
           baselines: Baselines | None = None, *, top: TopRungChoice | None = None,
           acceptance: AcceptanceBaselines | None = None,
           update: EngineUpdate | None = None) -> Decision:
    """Pick at most one action for this tick (see the module docstring for the order).

    ``top``: this tick's top-rung choice (``decide/top_switch.live_choice``; None: the
    choice is off).

    ``baselines``: calibrated tokens/s per request per mode; ``acceptance``: usual
    acceptance by draft position per mode; ``update``: the last good run on another engine
    version (all optional: without them the guards that compare against them stay
    silent)."""
    s = window.latest
    if s is None:
        return Decision(Action.HOLD, ladder.rung, "no sample yet")
    if ladder.gave_up:
        return Decision(Action.HOLD, ladder.rung, f"gave up: mode "
                        f"{policy.modes[ladder.rung].name} (the last rung) kept crashing")
    if ladder.reboot_required is not None:
        action = RECOMMENDED.get(ladder.reboot_required, ("RESTART_BM",))[0]
        return Decision(Action.HOLD, ladder.rung, f"reboot required "
                        f"({ladder.reboot_required}; recommended action {action}): the "
                        "engine stays stopped until the host is rebooted or the operator "
                        "resumes")
    # A stepped-up rung's probation runs from its engine's first serving (issue 29).
    serving = serving_since(ladder, s)
    ladder = begin_probation(ladder, serving, policy)
    sit = Situation(window, ladder, policy, now_s, baselines or {}, acceptance or {}, update)
    findings = findings_of(sit)
    decision = next((d for step in (_reboot, _startup, _emergency, _crash, _stopped, _reload,
                                    _cleared, _warnings, _pinned, partial(_top, top=top), _calm)
                     if (d := step(sit, findings)) is not None), None)
    if decision is None:
        mode, worst = policy.modes[ladder.rung].name, findings[0].summary if findings else None
        decision = Decision(Action.HOLD, ladder.rung, f"engine {s.engine_state} in mode {mode}"
                            + (f"; noted: {worst}" if worst else ""), tuple(findings))
    return decision if serving is None else dataclasses.replace(decision,
                                                                probation_from_s=serving)


def _top(sit: Situation, findings: list[Finding], *,
         top: TopRungChoice | None) -> Decision | None:
    """Step 5b: the traffic's top rung (``decide/top_switch.top_decision``), within the
    cooldown and the transitions per hour."""
    if top is None or top.action != "switch" or _blocked(sit) is not None:
        return None
    return top_decision(sit, findings, top)


def _name(sit: Situation, rung: int) -> str:
    return sit.policy.modes[rung].name


def _reboot(sit: Situation, findings: list[Finding]) -> Decision | None:
    gone = next((f for f in findings if f.response is Response.REBOOT_REQUIRED), None)
    if gone is None:
        return None
    return Decision(Action.REBOOT_REQUIRED, sit.ladder.rung, f"{gone.summary} -> kill what is "
                    f"left of the engine, hold, alert (recommended action "
                    f"{gone.recommended_action})", tuple(findings),
                    run_id=gone.run_id or (sit.latest.engine_run_id if sit.latest else None))


def _emergency(sit: Situation, findings: list[Finding]) -> Decision | None:
    em = [f for f in findings if f.response is Response.KILL_STEP_DOWN]
    if not em:
        return None
    s, ladder = sit.latest, sit.ladder
    if s is None or s.engine_state not in (EngineState.STARTING, EngineState.READY):
        return None       # nothing to kill; a stopped engine's start is held (_stopped)
    target = min(ladder.rung + 1, len(sit.policy.modes) - 1)
    where = (f"start {_name(sit, target)}" if target != ladder.rung
             else f"restart {_name(sit, target)} (already the safest rung)")
    in_probation = ladder.in_probation(sit.now_s)
    delay = 0.0
    if target == ladder.rung:        # nowhere lower to go: back off like a crash would
        delay = restart_delay(sit.policy.restart,
                              len(recent_crashes(ladder, sit.policy, sit.now_s)) + 1)
        where += f" in {delay:g} s"
    return Decision(Action.KILL_NOW, target, f"{em[0].summary} -> kill the engine now, {where}",
                    tuple(findings), run_id=s.engine_run_id, delay_seconds=delay,
                    marks_failing=ladder.rung if in_probation and target != ladder.rung
                    else None)


def _crash(sit: Situation, findings: list[Finding]) -> Decision | None:
    crash = next((f for f in findings if f.response in (
        Response.RESTART, Response.SKIP_SPECULATION, Response.CAP_CONTEXT)), None)
    if crash is None:
        return None
    ladder, policy, now = sit.ladder, sit.policy, sit.now_s
    rst = policy.restart
    if crash.kind in (str(CrashReason.SPAWN_RESOURCES), str(CrashReason.RUNTIME_UNAVAILABLE)):
        return _box_fault(sit, crash, findings)
    crashes = len(recent_crashes(ladder, policy, now)) + 1
    mode = _name(sit, ladder.rung)
    head = (f"{crash.summary}: crash {crashes} of mode {mode} within "
            f"{rst.start_limit_interval_seconds:g} s (start_limit_burst {rst.start_limit_burst})")
    evidence = {**crash.evidence, "crashes_in_interval": crashes,
                "start_limit_burst": rst.start_limit_burst,
                "start_limit_interval_seconds": rst.start_limit_interval_seconds}
    rest = tuple(f for f in findings if f is not crash)
    crash = dataclasses.replace(crash, evidence=evidence)
    found = (crash, *rest)
    if crash.response is Response.SKIP_SPECULATION:
        plain = policy.first_plain_rung_below(ladder.rung)
        # Reached by stepping up: bar it with the backoff, whenever the crash comes (issue 29).
        bar = ladder.rung if ladder.stepped_up or ladder.in_probation(now) else None
        if plain is not None:
            return Decision(Action.STEP_DOWN, plain, f"{crash.summary} -> skip speculation: "
                            f"step down to {_name(sit, plain)}" + ("" if bar is None else
                            f"; {mode} barred for a while"), found, run_id=crash.run_id,
                            marks_failing=bar)
    if crash.response is Response.CAP_CONTEXT:
        tokens = int(crash.evidence.get("prompt_tokens_in_flight") or 0)
        capped = first_capped_rung_below(policy, ladder.rung, tokens)
        if capped is not None:
            return Decision(Action.STEP_DOWN, capped, f"{crash.summary} -> step down to "
                            f"{_name(sit, capped)} (context cap "
                            f"{context_cap(policy.modes[capped])} tokens)", found,
                            run_id=crash.run_id)
    if ladder.in_probation(now):
        target = min(ladder.rung + 1, len(policy.modes) - 1)
        return Decision(Action.STEP_DOWN, target, f"{crash.summary} during the probation of "
                        f"{mode} -> back down to {_name(sit, target)}; {mode} barred for a while",
                        found, run_id=crash.run_id, marks_failing=ladder.rung)
    if (again := repeated_start(sit, found, head)) is not None:
        return again        # the same failed start twice: not a third time (issue 29)
    if crashes >= rst.start_limit_burst:
        skip = skip_target(sit, crash)
        if skip is not None:
            return Decision(Action.STEP_DOWN, skip[0], f"{head}, {skip[1]}: step down to "
                            f"{_name(sit, skip[0])}", found, run_id=crash.run_id)
        if ladder.rung + 1 < len(policy.modes):
            nxt = _name(sit, ladder.rung + 1)
            return Decision(Action.STEP_DOWN, ladder.rung + 1, f"{head} -> step down to {nxt}",
                            found, run_id=crash.run_id)
        return Decision(Action.GIVE_UP, ladder.rung, f"{head}, and it is the last rung -> "
                        "give up", found, run_id=crash.run_id)
    delay = restart_delay(rst, crashes)
    return Decision(Action.RESTART, ladder.rung, f"{head} -> restart in {delay:g} s", found,
                    delay_seconds=delay, run_id=crash.run_id,
                    start_signature=failure_signature(sit))


def _box_fault(sit: Situation, crash: Finding, findings: list[Finding]) -> Decision:
    """A spawn the box refused (descriptors, memory, processes; no container API): retry
    after a short delay, not counted as a crash of the mode (issue 17)."""
    delay = max(sit.policy.restart.restart_delay_seconds, SPAWN_RESOURCES_RETRY_SECONDS)
    return Decision(Action.RESTART, sit.ladder.rung, f"{crash.summary}: the box, not mode "
                    f"{_name(sit, sit.ladder.rung)}; not counted as a crash -> retry in "
                    f"{delay:g} s", (crash, *(f for f in findings if f is not crash)),
                    delay_seconds=delay, run_id=crash.run_id, box_fault=True)


def _stopped(sit: Situation, findings: list[Finding]) -> Decision | None:
    s, ladder = sit.latest, sit.ladder
    if s is None or s.engine_state is EngineState.READY:
        return None
    if s.engine_state is not EngineState.STOPPED:
        return Decision(Action.HOLD, ladder.rung, f"engine {s.engine_state} in mode "
                        f"{_name(sit, ladder.rung)}", tuple(findings))
    mode = _name(sit, ladder.rung)
    held = next((f for f in findings if f.response is Response.HOLD_START), None)
    if held is not None:
        return Decision(Action.HOLD, ladder.rung, f"engine stopped: start of mode {mode} "
                        f"held: {held.summary}", tuple(findings))
    wait = ladder.start_not_before_s - sit.now_s
    if wait <= 0:
        extra = "" if not ladder.start_args else " with start-up fallback " + " ".join(
            f"{k}={v}" for k, v in ladder.start_args)
        return Decision(Action.START, ladder.rung, f"engine stopped: start mode {mode}{extra}",
                        tuple(findings), start_args=ladder.start_args)
    return Decision(Action.HOLD, ladder.rung, f"engine stopped: start of mode {mode} due in "
                    f"{wait:.1f} s (restart backoff)", tuple(findings))


def _reload(sit: Situation, findings: list[Finding]) -> Decision | None:
    if not (sit.ladder.reload_pending or sit.ladder.restart_requested):
        return None
    mode = _name(sit, sit.ladder.rung)
    if not sit.ladder.reload_pending:
        return Decision(Action.RELOAD, sit.ladder.rung, f"operator asked for a restart -> "
                        f"drain and restart mode {mode}", tuple(findings), operator=True)
    return Decision(Action.RELOAD, sit.ladder.rung, f"policy reloaded: the engine runs "
                    f"arguments mode {mode} no longer has -> drain and restart it",
                    tuple(findings))


def _cleared(sit: Situation, findings: list[Finding]) -> Decision | None:
    """Load shed for a suspected hang comes back once the canary answered."""
    ladder, s = sit.ladder, sit.latest
    if not ladder.shed or ladder.shed_kind != "engine_hang_suspected" or s is None \
            or ladder.shed_since_s is None:
        return None
    if s.canary_ok is not True or s.canary_finished_s is None \
            or s.canary_finished_s < ladder.shed_since_s:
        return None
    if any(f.severity.rank >= Severity.WARNING.rank and f.response is not Response.RECORD
           for f in findings):
        return None
    return Decision(Action.SHED, ladder.rung, f"the canary answered in "
                    f"{s.canary_latency_seconds or 0:.1f} s: no hang -> restore the gateway "
                    "limits", tuple(findings), shed=False)


def _blocked(sit: Situation) -> str | None:
    """Why a graceful change may not happen now, or None."""
    ladder, hy, now = sit.ladder, sit.policy.hysteresis, sit.now_s
    if ladder.last_change_s is not None and now - ladder.last_change_s < hy.cooldown_seconds:
        left = hy.cooldown_seconds - (now - ladder.last_change_s)
        return f"cooldown ({left:.0f} s left of {hy.cooldown_seconds:g} s)"
    recent = [t for t in ladder.transitions_s if now - t < HOUR]
    if len(recent) >= hy.max_transitions_per_hour:
        return f"{len(recent)} transitions in the last hour (max_transitions_per_hour " \
               f"{hy.max_transitions_per_hour})"
    return None


def _warnings(sit: Situation, findings: list[Finding]) -> Decision | None:
    # A warning kept on record only (a crash precursor) asks for nothing.
    warnings = [f for f in findings
                if f.severity is Severity.WARNING and f.response is not Response.RECORD]
    if not warnings:
        return None
    ladder, policy, now = sit.ladder, sit.policy, sit.now_s
    # A step down that waits for a calm moment must not hold back one that cannot wait.
    when_calm = (Response.SKIP_SPECULATION_WHEN_CALM, Response.RESTART_WHEN_CALM)
    urgent = [f for f in warnings if f.response not in when_calm]
    # A relaunch of the same rung yields to any warning that wants a safer one.
    urgent.sort(key=lambda f: f.response is Response.RELAUNCH)
    w, found = (urgent or warnings)[0], tuple(findings)
    mode = _name(sit, ladder.rung)
    if ladder.paused or ladder.pinned is not None:
        why = "paused by the operator" if ladder.paused else "pinned by the operator"
        return Decision(Action.HOLD, ladder.rung, f"{w.summary}: automatic steps {why}", found)
    if w.response is Response.RELAUNCH:
        # The same rung again, now: no rung change, so no cooldown or probation applies.
        return Decision(Action.PLANNED_RESTART, ladder.rung, f"{w.summary}: drain and "
                        f"restart {mode} (planned: {w.kind})", found, run_id=w.run_id)
    bottom = len(policy.modes) - 1
    if ladder.in_probation(now) and ladder.rung < bottom \
            and w.response is not Response.RESTART_WHEN_CALM:
        return Decision(Action.STEP_DOWN, ladder.rung + 1, f"{w.summary} during the probation "
                        f"of {mode} -> back down to {_name(sit, ladder.rung + 1)}", found,
                        marks_failing=ladder.rung)
    shed_first = (Response.SHED_FIRST, Response.SHED_FIRST_FEWER_SEQUENCES)
    if w.response is Response.FEWER_SEQUENCES and not ladder.shed:
        meanwhile = _shed_meanwhile(sit, w, found)
        if meanwhile is not None:
            return meanwhile
    if w.response in (Response.SHED, *shed_first) and not ladder.shed:
        return Decision(Action.SHED, ladder.rung, f"{w.summary} -> shed: gateway limits x"
                        f"{policy.hysteresis.shed_factor:g}", found, shed=True)
    if w.response is Response.SHED:
        return Decision(Action.HOLD, ladder.rung, f"{w.summary}: load already shed", found)
    if w.response in shed_first and ladder.shed_since_s is not None:
        waited = now - ladder.shed_since_s
        if waited < policy.hysteresis.shed_seconds:
            return Decision(Action.HOLD, ladder.rung, f"{w.summary}: load shed {waited:.0f} s "
                            f"ago; stepping down if it persists {policy.hysteresis.shed_seconds:g}"
                            " s", found)
    target = _target(sit, w)
    if w.response in when_calm:
        deferred = _deferred(sit, w, target, found)
        if deferred is not None:
            return deferred
    if target > bottom:
        return Decision(Action.HOLD, ladder.rung, f"{w.summary}: already on the safest rung",
                        found)
    blocked = _blocked(sit)
    if blocked is not None:
        return Decision(Action.HOLD, ladder.rung, f"{w.summary}: would step down to "
                        f"{_name(sit, target)}, held by {blocked}", found)
    if target == ladder.rung:
        return Decision(Action.PLANNED_RESTART, target, f"{w.summary}: calm now -> drain "
                        f"and restart {_name(sit, target)} (planned: {w.kind})", found)
    return Decision(Action.STEP_DOWN, target, f"{w.summary} -> step down to "
                    f"{_name(sit, target)}", found)


def _shed_meanwhile(sit: Situation, w: Finding,
                    found: tuple[Finding, ...]) -> Decision | None:
    """A step down to fewer sequences that cannot happen now (cooldown, transitions per
    hour, the last rung): shed instead, or None."""
    ladder = sit.ladder
    bottom = len(sit.policy.modes) - 1
    held = _blocked(sit) or ("being on the safest rung" if ladder.rung == bottom else None)
    if held is None:
        return None
    return Decision(Action.SHED, ladder.rung, f"{w.summary}; the step down is held by {held} "
                    f"-> shed meanwhile: gateway limits x{sit.policy.hysteresis.shed_factor:g}",
                    found, shed=True)


def _target(sit: Situation, w: Finding) -> int:
    """Where a graceful step for warning ``w`` goes."""
    ladder, policy = sit.ladder, sit.policy
    if w.response in (Response.SHED_FIRST_FEWER_SEQUENCES, Response.FEWER_SEQUENCES):
        return policy.first_rung_with_fewer_sequences_below(ladder.rung) or ladder.rung + 1
    if w.response is Response.RESTART_WHEN_CALM:
        return ladder.rung                  # the same mode, its leaked memory handed back
    if w.response is Response.SKIP_SPECULATION_WHEN_CALM:
        # A rung without speculation, or with vLLM's dynamic k that stops speculating on
        # large batches (keeps it for small ones).
        return policy.first_rung_sparing_large_batches_below(ladder.rung) or ladder.rung + 1
    return ladder.rung + 1


def _deferred(sit: Situation, w: Finding, target: int,
              found: tuple[Finding, ...]) -> Decision | None:
    """HOLD while a when-calm step waits for a calm moment (at most its wait), or None."""
    ladder, policy = sit.ladder, sit.policy
    cfg = policy.guards.speculative
    max_wait = (policy.guards.memory_forecast.creep_calm_max_wait_seconds
                if w.response is Response.RESTART_WHEN_CALM else cfg.calm_max_wait_seconds)
    s = sit.latest
    # Unknown load is never calm (a missing series is not an idle engine).
    calm = s is not None and s.requests_running is not None \
        and s.requests_waiting is not None \
        and s.requests_running <= cfg.calm_max_requests and not s.requests_waiting
    waited = sit.now_s - (ladder.deferred_since_s or sit.now_s)
    if calm or waited >= max_wait:
        return None
    what = "restart of" if target == ladder.rung else "step down to"
    return Decision(Action.HOLD, ladder.rung, f"{w.summary}: {what} {_name(sit, target)} "
                    f"deferred to a calm moment ({waited:.0f} s of {max_wait:g} s)", found)


def _pinned(sit: Situation, findings: list[Finding]) -> Decision | None:
    ladder = sit.ladder
    target, how = ladder.pinned, "pinned by the operator to"
    if target is None or target == ladder.rung:
        target, how = ladder.requested, "moved by the operator to"
    if target is None or target == ladder.rung:
        return None
    action = Action.STEP_DOWN if target > ladder.rung else Action.STEP_UP
    return Decision(action, target, f"{how} {_name(sit, target)}", tuple(findings),
                    operator=True)


def _calm(sit: Situation, findings: list[Finding]) -> Decision | None:
    ladder, hy, now = sit.ladder, sit.policy.hysteresis, sit.now_s
    if ladder.paused or ladder.pinned is not None:
        return None
    calm = ladder.calm_for(now)
    found = tuple(findings)
    if ladder.shed and calm >= hy.cooldown_seconds:
        return Decision(Action.SHED, ladder.rung, f"calm for {calm:.0f} s -> restore the "
                        "gateway limits", found, shed=False)
    if ladder.rung <= ladder.top or calm < hy.calm_seconds or _blocked(sit) is not None:
        return None
    target = ladder.rung - 1
    barred = ladder.failing_until(target)
    if barred is not None and now < barred:
        return None
    if not in_step_up_hours(sit.policy, sit.latest.wall_s if sit.latest else None):
        return None
    return Decision(Action.STEP_UP, target, f"calm for {calm:.0f} s (calm_seconds "
                    f"{hy.calm_seconds:g}) -> step up to {_name(sit, target)} on probation for "
                    f"{hy.probation_seconds:g} s", found)

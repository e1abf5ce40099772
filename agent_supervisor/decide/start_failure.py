"""A failed start, judged on its class: a corrective retry, or no retry at all. Pure.

Step 0 of ``decide()`` (after a box that needs a reboot). The start-up guard
(``agent_supervisor.decide.guards.startup``) classed the run's whole failure from its log;
here that class becomes one action:

- ``RETRY_FALLBACK`` (start-up OOM, CUDA-graph capture OOM): the mode's next start-up
  fallback (memory fitted, eager mode); fallbacks used up: the ordinary crash path;
- ``NO_RETRY`` (bad argument, missing model): a rung without the refused flag, else give up;
- ``RETRY_ONCE_THEN_HOLD`` (model files cut short, a checkpoint this engine cannot load,
  a driver mismatch, a fabric set up wrong): the same configuration once more (a download
  that finished, a passing read error); the same signature again within the start limit's
  interval: give up, quoting the failing lines and saying what to fix. Never a step down:
  no rung serves another model, driver or fabric (issue 29);
- ``MOVE_CACHE`` (a poisoned compile/JIT cache): relaunch once with the caches moved aside
  (``Decision.move_caches``), never a ladder step; the same signature again: give up.
"""

from __future__ import annotations

import re

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Finding, Response
from agent_supervisor.decide.guards.startup import failing_lines
from agent_supervisor.decide.ladder import recent_crashes, restart_delay
from agent_supervisor.decide.lifecycle import fallback_overrides, rung_without_flag
from agent_supervisor.states import EngineState

__all__ = ["JUDGED", "failure_signature", "repeated_start", "startup_decision"]

#: The responses a failed start's class asks for (the findings this step acts on).
JUDGED = (Response.RETRY_FALLBACK, Response.NO_RETRY, Response.RETRY_ONCE_THEN_HOLD,
          Response.MOVE_CACHE)
#: Failing lines quoted in a give-up's explanation (all of them are in the evidence).
QUOTED_LINES = 2
#: Lines every failed vLLM start ends with, whatever the cause: no signature of their own.
_GENERIC = re.compile(r"Engine core initialization failed|WorkerProc initialization failed"
                      r"|EngineDeadError|died unexpectedly")
#: Numbers and addresses (pids, sizes, times) differ from start to start; masked.
_VARYING = re.compile(r"0x[0-9a-fA-F]+|\d+")
#: A signature is at most this long.
SIGNATURE_CHARS = 200


def _name(sit: Situation, rung: int) -> str:
    return sit.policy.modes[rung].name


def startup_decision(sit: Situation, findings: list[Finding]) -> Decision | None:
    """The action for a failed start's class, or None (no class, or fallbacks used up)."""
    f = next((f for f in findings if f.response in JUDGED), None)
    if f is None:
        return None
    found = (f, *(x for x in findings if x is not f))
    if f.response in (Response.RETRY_ONCE_THEN_HOLD, Response.MOVE_CACHE):
        return _once_then_hold(sit, f, found)
    ladder, policy = sit.ladder, sit.policy
    mode = _name(sit, ladder.rung)
    if f.response is Response.RETRY_FALLBACK:
        picked = fallback_overrides(sit, str(f.evidence.get("class")))
        if picked is None:
            return None       # fallbacks used up: an ordinary failed start (crash path)
        index, overrides, how = picked
        return Decision(Action.RESTART, ladder.rung, f"{f.summary} -> retry {mode} with {how} "
                        "(start-up fallback)", found, run_id=f.run_id,
                        start_args=overrides, fallback=index)
    flag = f.evidence.get("flag")
    target = rung_without_flag(policy, ladder.rung, flag) if flag else None
    if target is not None:
        return Decision(Action.STEP_DOWN, target, f"{f.summary} -> step down to "
                        f"{_name(sit, target)}, which does not set {flag}", found,
                        run_id=f.run_id)
    named = f" ({flag})" if flag and flag not in f.summary else ""
    return Decision(Action.GIVE_UP, ladder.rung, f"{f.summary}{named}: no rung can start "
                    "without it -> give up", found, run_id=f.run_id)


def _once_then_hold(sit: Situation, f: Finding, found: tuple[Finding, ...]) -> Decision:
    """Once more (with the caches moved aside for ``MOVE_CACHE``), then give up."""
    ladder, policy, now = sit.ladder, sit.policy, sit.now_s
    signature = str(f.evidence.get("signature") or f.kind)
    mode = _name(sit, ladder.rung)
    interval = policy.restart.start_limit_interval_seconds
    if ladder.failed_before(signature, now, interval):
        lines = [str(ln) for ln in f.evidence.get("failing_lines") or ()][:QUOTED_LINES]
        quoted = "; ".join(f"'{ln}'" for ln in lines) or "no error line in its log"
        return Decision(Action.GIVE_UP, ladder.rung, f"{f.summary}: the start of {mode} "
                        f"failed twice the same way ({signature}: {quoted}); not launched a "
                        f"third time, no rung fixes it -> give up; fix {f.evidence.get('fix')}",
                        found, run_id=f.run_id)
    crashes = len(recent_crashes(ladder, policy, now)) + 1
    delay = restart_delay(policy.restart, crashes)
    move = f.response is Response.MOVE_CACHE
    how = "with the compile caches moved aside" if move else "as it was, once"
    return Decision(Action.RESTART, ladder.rung, f"{f.summary} -> relaunch {mode} {how} in "
                    f"{delay:g} s (the same failure again: give up, no step down)", found,
                    run_id=f.run_id, delay_seconds=delay, start_signature=signature,
                    move_caches=move)


def failure_signature(sit: Situation) -> str | None:
    """The first error line of a failed start that never served (numbers masked), or None:
    the same root cause on every start reads the same."""
    s = sit.latest
    if s is None or s.engine_state is not EngineState.CRASHED or s.engine_was_ready is not False:
        return None
    lines = [ln for ln in failing_lines(sit.run_samples(), tagged_only=False)
             if not _GENERIC.search(ln)]
    return _VARYING.sub("#", lines[0])[:SIGNATURE_CHARS] if lines else None


def repeated_start(sit: Situation, found: tuple[Finding, ...], head: str) -> Decision | None:
    """A start of no known class that failed again with the first error line of an earlier
    one (within the start limit's interval) is not launched a third time as it was: one
    rung down, or give up on the last rung; None otherwise (issue 29)."""
    ladder, policy = sit.ladder, sit.policy
    signature = failure_signature(sit)
    interval = policy.restart.start_limit_interval_seconds
    if signature is None or not ladder.failed_before(signature, sit.now_s, interval):
        return None
    why = f"{head}; the start failed twice the same way ('{signature}')"
    run_id = found[0].run_id if found else None
    if ladder.rung + 1 < len(policy.modes):
        return Decision(Action.STEP_DOWN, ladder.rung + 1, f"{why}: not launched a third time "
                        f"as it was -> step down to {_name(sit, ladder.rung + 1)}", found,
                        run_id=run_id)
    return Decision(Action.GIVE_UP, ladder.rung, f"{why}, on the last rung -> give up", found,
                    run_id=run_id)

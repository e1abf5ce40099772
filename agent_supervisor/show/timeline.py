"""``supervisor replay``: the decisions of a recorded trace as a timeline (or JSON)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.replay import ReplayStep, load_scenario, replay, replay_scenario
from agent_supervisor.policy import Policy
from agent_supervisor.record.trace import read_trace
from agent_supervisor.sense.reclassify import reclassify

__all__ = ["replay_command", "scenario_command", "timeline"]


def timeline(steps: list[ReplayStep], policy: Policy, *, show_all: bool = False) -> str:
    """One line per decision (holds only with ``show_all``): seconds from the first
    sample, action, mode, explanation, and ``!=live`` where live decided otherwise."""
    if not steps:
        return "(no samples in the trace)"
    t0 = steps[0].t_s
    lines = []
    for st in steps:
        d = st.decision
        if d.action is Action.HOLD and not show_all and st.matches is not False:
            continue
        mark = {None: "", True: "", False: "  !=live: " + str(
            (st.recorded or {}).get("explanation"))}[st.matches]
        lines.append(f"{st.t_s - t0:9.1f} s  {d.action:9s} {policy.modes[d.rung].name:12s} "
                     f"{d.explanation}{mark}")
    compared = [st for st in steps if st.matches is not None]
    same = sum(bool(st.matches) for st in compared)
    summary = (f"{len(steps)} decisions replayed"
               + (f"; {same} of {len(compared)} identical to the live run" if compared else ""))
    return "\n".join([*lines, summary])


def replay_command(trace: Path, policy: Policy, *, as_json: bool, show_all: bool) -> int:
    """Print the replay; exit 0 when every decision matches the live one (or none were
    recorded), 1 when some differ, 2 when the trace cannot be read."""
    try:
        records = read_trace(trace, rungs=len(policy.modes),
                             warn=lambda text: print(f"warning: {text}", file=sys.stderr))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    steps = replay(records, policy, reclassify=reclassify)
    if as_json:
        for st in steps:
            if st.decision.action is not Action.HOLD or show_all:
                print(json.dumps({"t_s": st.t_s, **st.decision.to_dict(),
                                  "matches_live": st.matches}))
    else:
        print(timeline(steps, policy, show_all=show_all))
    return 1 if any(st.matches is False for st in steps) else 0


def scenario_command(path: Path, policy: Policy, *, as_json: bool, show_all: bool) -> int:
    """Run a closed-loop scenario (``agent_supervisor.decide.replay.Scenario``) and print its
    decisions; exit 0, or 2 when the file cannot be read or is not a valid scenario."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a scenario is a mapping, got {type(data).__name__}")
        scenario = load_scenario(data, source=str(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        print(f"error: {path}:{where} not YAML: {getattr(exc, 'problem', exc)}",
              file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    steps = replay_scenario(scenario, policy, reclassify)
    if as_json:
        for st in steps:
            if st.decision.action is not Action.HOLD or show_all:
                print(json.dumps({"t_s": st.t_s, **st.decision.to_dict()}))
    else:
        print(timeline(steps, policy, show_all=show_all))
    return 0

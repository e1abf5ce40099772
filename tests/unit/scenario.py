"""Hand-written traces for guard scenario tests: a policy shaped like the CPU demo and a
tiny builder of Samples whose fields are constants or functions of time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Decision
from agent_supervisor.decide.ladder import LadderState, advance
from agent_supervisor.policy import load_policy
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

GiB = 1024**3

POLICY_YAML = """
fleet: t
engine: {executable: vllm}
modes:
  - {name: mtp2, args: {--speculative-config: {method: mtp, num_speculative_tokens: 2}}}
  - {name: mtp1, args: {--speculative-config: {method: mtp, num_speculative_tokens: 1}}}
  - {name: nospec, args: {--max-num-seqs: 4}}
  - {name: safe, args: {--max-num-seqs: 2}, gateway: {max_tokens_in_flight: 4000}}
guards:
  memory_floor: {min_available_bytes: 2147483648}
hysteresis: {cooldown_seconds: 300, calm_seconds: 600, probation_seconds: 300,
             max_transitions_per_hour: 3}
"""
POLICY = load_policy(POLICY_YAML)


def samples(t0: float, t1: float, dt: float = 1.0, *, run: str = "r1", rung: int = 0,
            ready_since: float = 0.0, **fields: Any) -> list[Sample]:
    """Samples every ``dt`` from ``t0`` to ``t1`` of a READY engine; a field given as a
    callable is called with the time."""
    out = []
    t = t0
    while t <= t1 + 1e-9:
        values = {k: (v(t) if callable(v) else v) for k, v in fields.items()}
        values.setdefault("engine_state", EngineState.READY)
        values.setdefault("engine_state_since_s", ready_since)
        out.append(Sample(t_s=t, engine_run_id=run, engine_rung=rung, **values))
        t += dt
    return out


def decide_on(trace: list[Sample], ladder: LadderState | None = None,
              policy=POLICY, baselines=None) -> Decision:
    """The decision at the end of ``trace``."""
    ladder = ladder or LadderState(rung=trace[-1].engine_rung or 0, since_s=trace[0].t_s)
    return decide(Window.of(trace, 3600), ladder, policy, trace[-1].t_s, baselines)


def play(trace: list[Sample], ladder: LadderState, policy=POLICY, baselines=None,
         on: Callable[[Decision], None] | None = None) -> tuple[list[Decision], LadderState]:
    """Decide after every sample, advancing the ladder as the service does."""
    window = Window(3600)
    decisions = []
    for s in trace:
        window.append(s)
        d = decide(window, ladder, policy, s.t_s, baselines)
        decisions.append(d)
        ladder = advance(ladder, d, policy, s.t_s)
    return decisions, ladder

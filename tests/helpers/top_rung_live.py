"""The live top-rung choice in a closed loop (issue 32 item 2, wired): ``decide()`` with
``top_switch.live_choice`` each tick, the ladder advanced by what it decides, and an
engine that stops, starts (its measured start time) and serves in the mode it was put in.

Figures: this box's CPU engine, tiny Llama, n-gram k=5 against plain decoding: 287 against
144 tokens/s for one request, 68 against 100 per request at six (``supervisor calibrate
--concurrency 1,6``, docs/figures.md). Made up (filler): the figures at two requests,
the prose profile's, the acceptances at position 0 per profile and the start times (the
CPU engine is ready in 18-27 s with --enforce-eager: shared/CPU_ENGINE.md)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.ladder import LadderState, advance
from agent_supervisor.decide.top_rung import TopRungState
from agent_supervisor.decide.top_switch import live_choice, settle, top_figures
from agent_supervisor.policy import Policy, load_policy
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

TICK = 5.0
FIGURES_YAML = """
    tokens_per_second:
      fast: {code: [[1, 287], [2, 200], [6, 68]], prose: [[1, 170], [2, 130], [6, 60]]}
      nospec: {code: [[1, 144], [2, 135], [6, 100]], prose: [[1, 144], [2, 135], [6, 100]]}
    acceptance: {fast: {code: 0.9, prose: 0.3}}
    start_seconds: {fast: 30, nospec: 25}
"""


def live_policy(candidates: str = "[fast, nospec]", **top: object) -> Policy:
    """Three rungs (n-gram k=5, plain, two sequences); the top chosen among the first two."""
    extra = "".join(f"\n  {k}: {v}" for k, v in top.items())
    return load_policy(f"""
fleet: t
engine: {{executable: vllm}}
modes:
  - name: fast
    args: {{--speculative-config: {{method: ngram, num_speculative_tokens: 5,
                                    prompt_lookup_max: 4, prompt_lookup_min: 2}}}}
  - name: nospec
  - name: safe
    args: {{--max-num-seqs: 2}}
hysteresis: {{calm_seconds: 60, cooldown_seconds: 30, probation_seconds: 60,
              max_transitions_per_hour: 60}}
top_rung:
  enabled: true
  modes: {candidates}
  sustain_seconds: 30
  calm_max_requests: 8{extra}
  figures:{FIGURES_YAML}
""")


#: (running requests, code share) at a time of the day (seconds).
Phase = Callable[[random.Random, float], tuple[float, float]]


@dataclass
class Loop:
    """One closed loop; ``run`` it, then read ``switches`` and ``decisions``."""

    policy: Policy
    phase: Phase
    seed: int = 0
    jitter: float = 0.05
    rng: random.Random = field(init=False)
    window: Window = field(default_factory=lambda: Window(max_age_seconds=900))
    ladder: LadderState = field(init=False)
    top: TopRungState | None = None
    engine: str = "stopped"
    engine_rung: int = 0
    ready_at: float = 0.0
    run: int = 0
    drafts: float = 0.0
    accepted: float = 0.0
    switches: list[tuple[float, str]] = field(default_factory=list)
    decisions: list[tuple[float, Decision]] = field(default_factory=list)
    serving_rungs: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.ladder = LadderState.initial(self.policy)
        figures = top_figures(self.policy, None)
        assert figures is not None
        self.figures = figures

    def _sample(self, t: float) -> Sample:
        if self.engine == "starting" and t >= self.ready_at:
            self.engine = "ready"
        if self.engine != "ready":
            state = EngineState.STOPPED if self.engine == "stopped" else EngineState.STARTING
            return Sample(t_s=t, engine_state=state, engine_state_since_s=t,
                          engine_rung=self.engine_rung)
        running, code = self.phase(self.rng, t)
        mode = self.policy.modes[self.engine_rung].name
        acc = self.figures.acceptance.get(mode)
        if acc is not None:
            a = code * acc["code"] + (1 - code) * acc["prose"]
            self.drafts += 40 * TICK
            self.accepted += 40 * TICK * min(1.0, max(0.0, a + self.rng.gauss(0, self.jitter)))
        self.serving_rungs.append(self.engine_rung)
        return Sample(t_s=t, engine_state=EngineState.READY, engine_state_since_s=self.ready_at,
                      engine_run_id=f"r{self.run}", engine_rung=self.engine_rung,
                      engine_core_alive=True, health_status=200, requests_running=running,
                      requests_waiting=0,
                      spec_decode_num_drafts_total=self.drafts if acc is not None else None,
                      spec_decode_accepted_per_position_total=(self.accepted,)
                      if acc is not None else None)

    def run_for(self, seconds: float, t0: float = 0.0) -> Loop:
        """Tick every ``TICK`` seconds from ``t0`` for ``seconds``."""
        t = t0
        while t < t0 + seconds:
            self.window.append(self._sample(t))
            before, after, choice = live_choice(self.top, self.window, self.ladder,
                                                self.policy, self.figures, t)
            d = decide(self.window, self.ladder, self.policy, t, top=choice)
            self.top = settle(before, after, choice, d, self.policy)
            self.ladder = advance(self.ladder, d, self.policy, t)
            self.decisions.append((t, d))
            if d.top_rung is not None:
                self.switches.append((t, self.policy.modes[d.top_rung].name))
            self._carry_out(d, t)
            t += TICK
        return self

    def _carry_out(self, d: Decision, t: float) -> None:
        if d.action in (Action.STEP_UP, Action.STEP_DOWN, Action.RESTART, Action.KILL_NOW,
                        Action.PLANNED_RESTART):
            self.engine = "stopped"
        elif d.action is Action.START:
            mode = self.policy.modes[d.rung].name
            self.engine, self.engine_rung, self.run = "starting", d.rung, self.run + 1
            self.ready_at = t + self.figures.start_seconds.get(mode, 25.0)
            self.drafts = self.accepted = 0.0

"""The top-rung choice replayed over synthetic days (issue 32 item 2): GB10 field figures
per workload profile, the policy's rules, and a replay that drives ``choose_top_rung``
tick by tick; shared by the unit and the property tests of tests/*/test_top_rung*."""

from __future__ import annotations

import random
from collections.abc import Callable

from agent_supervisor.decide.top_rung import (
    TopRungFigures,
    TopRungState,
    choose_top_rung,
)
from agent_supervisor.policy.speculative import TopRungSpec
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

FIGURES = TopRungFigures(
    tokens_per_second={
        "dspark": {"code": [(1, 51.5), (4, 40.0), (8, 30.0)],
                   "long_form": [(1, 18.3), (4, 15.0), (8, 12.0)]},
        "mtp": {"code": [(1, 34.5), (4, 29.0), (8, 24.0)],
                "long_form": [(1, 24.1), (4, 21.0), (8, 18.0)]},
        "nospec": {"code": [(1, 20.0), (4, 18.5), (8, 17.0)],
                   "long_form": [(1, 20.0), (4, 18.5), (8, 17.0)]},
    },
    acceptance={"dspark": {"code": 0.80, "long_form": 0.35},
                "mtp": {"code": 0.60, "long_form": 0.72}},
    start_seconds={"dspark": 35.0, "mtp": 35.0, "nospec": 20.0},
)
RULES = TopRungSpec()
TICK = 5.0


def true_acceptance(mode: str, code_share: float) -> float | None:
    per = FIGURES.acceptance.get(mode)
    if per is None:
        return None
    return code_share * per["code"] + (1 - code_share) * per["long_form"]


class World:
    """Counters of an engine serving a mix: drafts and accepted-at-0 grow each tick."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.drafts = 0.0
        self.accepted0 = 0.0
        self.prompt = 0.0
        self.repeated = 0.0
        self.window = Window(max_age_seconds=900)

    def tick(self, t: float, mode: str, code_share: float, running: float,
             waiting: float = 0.0, jitter: float = 0.06) -> None:
        a = true_acceptance(mode, code_share)
        drafts = 40.0 * TICK
        if a is not None:
            self.drafts += drafts
            self.accepted0 += drafts * min(1.0, max(0.0, a + self.rng.gauss(0, jitter)))
        self.prompt += 500 * TICK
        self.repeated += 500 * TICK * code_share
        self.window.append(Sample(
            t_s=t, engine_run_id=mode, requests_running=running, requests_waiting=waiting,
            spec_decode_num_drafts_total=self.drafts if a is not None else None,
            spec_decode_accepted_per_position_total=(self.accepted0,) if a is not None
            else None,
            prompt_tokens_total=self.prompt,
            gateway_repeated_prefix_tokens_total=int(self.repeated)))


def replay(seed: int, hours: float, code_share: Callable[[float], float],
           load: Callable[[random.Random, float], tuple[float, float]],
           top: str = "mtp", rules: TopRungSpec = RULES) -> list[tuple[float, object]]:
    """The choice each tick; a switch moves the running engine to the new top."""
    world = World(seed)
    state = TopRungState(top=top)
    out = []
    t = 0.0
    while t < hours * 3600:
        running, waiting = load(world.rng, t)
        world.tick(t, state.top, code_share(t), running, waiting)
        state, choice = choose_top_rung(state, world.window, state.top, FIGURES, rules, t)
        out.append((t, choice))
        t += TICK
    return out


def jittered_load(rng: random.Random, _t: float) -> tuple[float, float]:
    running = max(0.0, rng.gauss(2.5, 1.5))
    return round(running), float(rng.random() < 0.2)


def switches(choices: list[tuple[float, object]]) -> list[tuple[float, str]]:
    return [(t, c.target) for t, c in choices if c.action == "switch"]  # type: ignore[attr-defined]

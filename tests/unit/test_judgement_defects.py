"""Issue 29, item 6: defects found on the way, each replayed through the real ``decide()``.

- b. ``telemetry_degraded`` expects only the series the engine's profile exports
  (``agent_supervisor.telemetry.engine_series``): llama-server has no preemption counter and
  no KV-cache series (llama.cpp #13660, #22879), vLLM has both.
- c. Probation counts from the stepped-up rung's first serving, not from the step up, and
  a speculative-signature crash on a rung reached by stepping up bars it whenever it
  comes. Replayed closed-loop (``_World``): the issue's schedule, a start of 50 s and a
  persistent speculative crash 61 s after each step up (probation 60 s), which made the
  ladder climb back into the crashing rung every 45-55 s.
- d. A hang on a huge prompt is judged with the prompt tokens in flight when the stall
  began: a client re-sending its prompt (retries stack in the gateway's count) no longer
  moves the verdict away (the field case of eugr/spark-vllm-docker#409, with re-sends).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.ladder import LadderState, advance
from agent_supervisor.policy import Policy, load_policy, load_policy_file
from agent_supervisor.sense.engine_metrics import parse_metrics
from agent_supervisor.sense.profiles import profile_for
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.engine_series import ENGINE_SERIES
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window
from tests.helpers.field_cases import FIELD, first_action, load_case, play_case
from tests.unit.scenario import POLICY, POLICY_YAML, play, samples

ROOT = Path(__file__).resolve().parents[2]
SCRAPES = {"vllm": ROOT / "tests/fixtures/vllm/0.32.0/mtp2.busy.metrics.txt",
           "llama_cpp": ROOT / "tests/fixtures/llamacpp/0.3.36/metrics.txt"}


def _scraped(kind: str) -> dict[str, Any]:
    """The Sample fields the engine's recorded scrape fills, read through its profile."""
    profile = profile_for(kind)
    values = parse_metrics(SCRAPES[kind].read_text(), table=profile.metrics,
                           per_position=profile.per_position_metric)
    return {k: v for k, v in values.items() if v is not None}


def _stream(kind: str, **drop: None) -> dict[str, Any]:
    """An engine serving for 300 s with every series its scrape has (counters moving)."""
    fields: dict[str, Any] = {**_scraped(kind), **drop}
    for name, value in list(fields.items()):
        if name.endswith("_total") and isinstance(value, float):
            fields[name] = lambda t, v=value: v + 10 * t
        elif isinstance(value, tuple):
            fields[name] = lambda t, v=value: tuple(x + 2 * t for x in v)
    return fields


def _degraded(decisions: list[Decision]) -> list[dict[str, Any]]:
    return [f.evidence for d in decisions for f in d.findings if f.kind == "telemetry_degraded"]


def _play(policy: Policy, fields: dict[str, Any]) -> list[Decision]:
    decisions, _ = play(samples(0, 300, 5.0, **fields), LadderState(0, since_s=0), policy)
    return decisions


def test_issue_29_profiles_declare_the_series_their_scrapes_fill() -> None:
    for kind, path in SCRAPES.items():
        profile = profile_for(kind)
        assert profile.series == ENGINE_SERIES[kind]
        assert profile.series <= {*profile.metrics, "spec_decode_accepted_per_position_total"}
        assert profile.series <= set(_scraped(kind)), path
    assert {"preemptions_total", "kv_cache_usage_ratio"} & ENGINE_SERIES["llama_cpp"] == set()


def test_issue_29_llama_server_with_all_its_series_is_not_degraded() -> None:
    policy = load_policy_file(ROOT / "policies" / "gb10-llamacpp.yaml")
    assert policy.engine.kind == "llama_cpp" and policy.modes[0].speculative
    decisions = _play(policy, _stream("llama_cpp"))
    assert decisions[-1].rung == 0       # served 300 s in its speculative mode, no step
    assert _degraded(decisions) == []


def test_issue_29_vllm_without_a_series_it_exports_is_still_degraded() -> None:
    assert POLICY.engine.kind == "vllm"
    decisions = _play(POLICY, _stream("vllm", preemptions_total=None))
    seen = _degraded(decisions)
    assert seen and seen[0]["missing"] == ["preemptions_total"]
    assert seen[0]["guards"] == ["preemption_storm"]
    assert _degraded(_play(POLICY, _stream("vllm"))) == []     # all there: none


# -- c. probation from the first serving; a speculative crash bars a stepped-up rung ------

#: The chaos day's hysteresis (agent_supervisor/chaos/day.py): probation 60 s; the rung
#: backoff is the default 3600 s.
DAY = load_policy(POLICY_YAML.replace(
    "hysteresis: {cooldown_seconds: 300, calm_seconds: 600, probation_seconds: 300,",
    "hysteresis: {cooldown_seconds: 20, calm_seconds: 120, probation_seconds: 60,").replace(
    "max_transitions_per_hour: 3}", "max_transitions_per_hour: 60}"))
START_S = 49.0        # START one tick after the step up: serving 50 s after it
SPEC_TAGS = ("cuda_illegal_memory_access",)


@dataclass
class _World:
    """The engine as the executor drives it: every action but HOLD and SHED stops it, a
    START launches it (ready ``START_S`` later); it crashes ``crash_after_s`` after it began
    serving on a rung in ``crash_rungs`` (``tags``: the crash's log signatures)."""

    crash_rungs: tuple[int, ...]
    crash_after_s: float
    tags: tuple[str, ...]
    rung: int = 2
    run: int = 1
    state: EngineState = EngineState.READY
    since_s: float = 0.0

    def tick(self, t: float) -> Sample:
        if self.state is EngineState.STARTING and t - self.since_s >= START_S:
            self.state, self.since_s = EngineState.READY, t
        crash = self.state is EngineState.READY and self.rung in self.crash_rungs \
            and t - self.since_s >= self.crash_after_s
        if crash:
            self.state, self.since_s = EngineState.CRASHED, t
        ready = self.state is EngineState.READY
        return Sample(t_s=t, engine_state=self.state, engine_state_since_s=self.since_s,
                      engine_run_id=f"r{self.run}", engine_rung=self.rung,
                      engine_crash_reason="exited" if crash else None,
                      engine_log_tags=self.tags if crash else (),
                      requests_running=1.0 if ready else None,
                      requests_waiting=0.0 if ready else None,
                      generation_tokens_total=20.0 * t, prompt_tokens_total=50.0 * t,
                      iteration_tokens_count_total=10.0 * t)

    def act(self, t: float, d: Decision) -> None:
        if d.action is Action.START:
            self.run, self.rung = self.run + 1, d.rung
            self.state, self.since_s = EngineState.STARTING, t
        elif d.action not in (Action.HOLD, Action.SHED):
            self.state, self.since_s = EngineState.STOPPED, t


def _run(world: _World, until_s: float) -> tuple[list[tuple[float, Decision, LadderState]],
                                                 LadderState]:
    """Decide every second, as the service does; (time, decision, ladder after) each."""
    window, ladder = Window(DAY.sampling.window_seconds), LadderState(2, since_s=0.0)
    out = []
    for t in range(int(until_s) + 1):
        window.append(world.tick(float(t)))
        d = decide(window, ladder, DAY, float(t))
        ladder = advance(ladder, d, DAY, float(t))
        world.act(float(t), d)
        out.append((float(t), d, ladder))
    return out, ladder


def _acted(steps: list[tuple[float, Decision, LadderState]]) -> list[tuple[float, str, int]]:
    return [(t, str(d.action), d.rung) for t, d, _ in steps
            if d.action not in (Action.HOLD, Action.START)]


def test_issue_29_probation_starts_when_the_stepped_up_rung_serves() -> None:
    steps, _ = _run(_World(crash_rungs=(), crash_after_s=0.0, tags=()), 300)
    up = next(t for t, d, _ in steps if d.action is Action.STEP_UP)
    assert up == 120.0                                   # calm_seconds after the start
    during_start = [lad for t, _, lad in steps if up <= t < up + 50]
    assert all(lad.probation_until_s is None and lad.probation_pending_since_s == up
               and lad.in_probation(up + 49) for lad in during_start)
    serving = next(d for t, d, _ in steps if d.probation_from_s is not None)
    assert serving.probation_from_s == up + 50            # the new engine's ready time
    after = next(lad for t, _, lad in steps if t == up + 50)
    assert after.probation_until_s == up + 50 + 60 and after.probation_pending_since_s is None
    assert not after.in_probation(up + 110) and after.stepped_up
    # What `supervisor status` and supervisor_probation_seconds_left show.
    assert during_start[-1].probation_left(up + 49, 60.0) == 60.0
    assert after.probation_left(up + 60, 60.0) == 50.0
    assert after.probation_left(up + 110, 60.0) is None


def test_issue_29_speculative_crash_61_s_after_the_step_up_bars_the_rung() -> None:
    # The issue's schedule: start 50 s, crash 61 s after the step up, probation 60 s.
    steps, ladder = _run(_World(crash_rungs=(0, 1), crash_after_s=11.0, tags=SPEC_TAGS), 1800)
    acted = _acted(steps)
    assert acted[:2] == [(120.0, "step_up", 1), (181.0, "step_down", 2)]
    crash = next(d for t, d, _ in steps if t == 181.0)
    assert crash.marks_failing == 1 and crash.findings[0].response == "skip_speculation"
    assert "mtp1 barred for a while" in crash.explanation
    assert ladder.failing_until(1) == 181.0 + 3600.0
    # Calm again for 1,600 s: the ladder never climbs back into mtp1 within the backoff.
    assert [a for a in acted if a[1] == "step_up"] == [(120.0, "step_up", 1)]
    assert acted[2:] == []


def test_issue_29_a_plain_crash_long_after_probation_does_not_bar_the_rung() -> None:
    # Control: no speculative signature, 200 s after the probation ended: a restart. (The
    # ladder climbs on to mtp2 at 240 s, calm again; mtp2 serves from 290 s.)
    world = _World(crash_rungs=(0, 1), crash_after_s=60.0 + 200.0, tags=())
    steps, ladder = _run(world, 600)
    acted = _acted(steps)
    assert acted == [(120.0, "step_up", 1), (240.0, "step_up", 0), (550.0, "restart", 0)]
    restart = next(d for t, d, _ in steps if t == 550.0)
    assert restart.marks_failing is None and ladder.failing == () and ladder.rung == 0


# -- d. a client re-sending its huge prompt does not move the hang verdict ----------------

PROMPT = 560_000          # the report's ~560K-token prompt (580,000 in flight with 2 x 10K)


def _resent(x: Sample) -> Sample:
    """``x`` with the client's re-sends of the prompt stacked in the gateway's count: one
    every 120 s from 420 s (its own timeout) while the stall lasts."""
    copies = max(0, int((x.t_s - 300) // 120))
    return dataclasses.replace(
        x, gateway_prompt_tokens_in_flight=(x.gateway_prompt_tokens_in_flight or 0)
        + copies * PROMPT, gateway_requests_in_flight=(x.gateway_requests_in_flight or 0)
        + copies)


def test_issue_29_a_client_resending_its_huge_prompt_does_not_move_the_hang_verdict() -> None:
    case = load_case(FIELD / "engine_hung" / "huge_prompt_hang.yaml")
    resent = dataclasses.replace(case, samples=[_resent(x) for x in case.samples])
    assert resent.samples[-1].gateway_prompt_tokens_in_flight == 580_000 + 3 * PROMPT
    alone = first_action(play_case(case), skip=("shed",))
    again = first_action(play_case(resent), skip=("shed",))
    assert alone is not None and again is not None, "no hang verdict with the re-sends"
    assert again[0] == alone[0] and 700 <= again[0] <= 715
    assert (again[1].action, again[1].rung) == (Action.STEP_DOWN, 2)   # the 128K cap rung
    evidence = again[1].findings[0].evidence
    assert evidence["prompt_tokens_in_flight"] == 580_000
    assert evidence["prompt_tokens_in_flight_now"] == 580_000 + 3 * PROMPT
    assert evidence["stall_seconds"] == round(60 + 0.58 * 600, 1)

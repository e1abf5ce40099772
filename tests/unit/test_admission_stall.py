"""Issue 29, item 3: progress that finishes. Requests finished are read as a heartbeat
beside tokens, and a scheduler that stops admitting (requests waiting, none finishing, the
KV cache far from full, prompt tokens still advancing) is a hang.

The field case is vllm #53130 (tests/fixtures/field/engine_admission_stall/); the parser
reads vLLM 0.32.0's recorded scrapes and the labelled series of the report's own lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.guards import admission_stall, engine_hung
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.policy import load_policy
from agent_supervisor.sense.engine_metrics import parse_metrics
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window
from tests.helpers.field_cases import FIELD, first_action, load_case, play_case
from tests.unit.scenario import POLICY_YAML, samples

ROOT = Path(__file__).resolve().parents[2]
CASES = FIELD / "engine_admission_stall"
POLICY = load_policy(POLICY_YAML)          # rung 2 (nospec) runs --max-num-seqs 4


def _check(trace: list[Sample], policy=POLICY, rung: int = 2) -> list[Any]:
    sit = Situation(Window.of(trace, 3600), LadderState(rung=rung, since_s=0.0), policy,
                    trace[-1].t_s)
    return admission_stall.check(sit)


def _stalled(t1: float, **over: Any) -> list[Sample]:
    """Serving 0-100 s (finishing), then from 100 s nothing finishes while 3 wait, 2 run
    (of 4 seats), KV 20%, prompt tokens advancing: the shape of vllm #53130."""
    fields: dict[str, Any] = {
        "requests_running": 2, "kv_cache_usage_ratio": 0.2,
        "requests_waiting": lambda t: 0 if t < 100 else 3,
        "requests_finished_total": lambda t: 50 + min(t, 100) / 10,
        "prompt_tokens_total": lambda t: 1946.0 * t,
        "generation_tokens_total": lambda t: 10 * min(t, 100) + 0.48 * max(t - 100, 0),
        "iteration_tokens_count_total": lambda t: t}
    fields.update(over)
    return samples(0, t1, 5.0, rung=2, **fields)


def test_issue_29_metrics_read_finished_without_aborts_and_waiting_by_reason() -> None:
    # The report's own series names and labels (vllm #53130; 0.32.0's HELP lines).
    text = ('vllm:request_success_total{engine="0",finished_reason="stop"} 7\n'
            'vllm:request_success_total{engine="0",finished_reason="length"} 2\n'
            'vllm:request_success_total{engine="0",finished_reason="abort"} 40\n'
            'vllm:request_success_total{engine="0",finished_reason="error"} 1\n'
            'vllm:request_success_total{engine="1",finished_reason="stop"} 3\n'
            'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 19\n'
            'vllm:num_requests_waiting_by_reason{engine="0",reason="deferred"} 468\n')
    values = parse_metrics(text)
    assert values["requests_finished_total"] == 12.0        # stop + length, both engines
    assert values["requests_waiting_capacity"] == 19.0
    assert values["requests_waiting_deferred"] == 468.0
    # A build without the series: unknown, never 0.
    older = parse_metrics('vllm:num_requests_waiting{engine="0"} 3\n')
    assert older["requests_finished_total"] is None
    assert older["requests_waiting_capacity"] is None


def test_issue_29_the_recorded_scrape_counts_its_finished_requests() -> None:
    scrape = ROOT / "tests/fixtures/vllm/0.32.0/plain.busy.metrics.txt"
    values = parse_metrics(scrape.read_text())
    # finished_reason="length" 3.0, every other reason 0.0 in that scrape.
    assert values["requests_finished_total"] == 3.0
    assert values["requests_waiting_capacity"] == 0.0
    assert values["requests_waiting_deferred"] == 0.0


def test_issue_29_new_sample_fields_round_trip() -> None:
    s = Sample(t_s=1.0, requests_finished_total=4.0, requests_waiting_capacity=1.0,
               requests_waiting_deferred=2.0, engine_rss_anon_bytes=10, engine_swap_bytes=20)
    assert Sample.from_dict(s.to_dict()) == s


def test_issue_29_stall_is_judged_after_the_window_not_before() -> None:
    assert _check(_stalled(395)) == []           # 295 s without a finish (since t=100)
    found = _check(_stalled(405))
    assert [f.kind for f in found] == ["engine_admission_stall"]
    ev = found[0].evidence
    assert ev["no_finish_seconds"] == 305.0 and ev["requests_waiting"] == 3
    assert ev["prompt_tokens_per_second"] == pytest.approx(1946.0)
    assert found[0].response == "restart"


def test_issue_29_one_finish_restarts_the_count() -> None:
    finished = lambda t: 60.0 if t < 350 else 61.0          # noqa: E731 - one at 350 s
    assert _check(_stalled(600, requests_finished_total=finished)) == []
    assert _check(_stalled(660, requests_finished_total=finished))   # 310 s since it


@pytest.mark.parametrize(("over", "why"), [
    ({"kv_cache_usage_ratio": 0.97}, "a full KV cache is the preemption guard's"),
    ({"kv_cache_usage_ratio": None}, "KV unknown"),
    ({"requests_finished_total": None}, "no finished counter (llama-server)"),
    ({"requests_running": 4}, "a full batch of 4 seats"),
    ({"requests_waiting": lambda t: 0 if t < 100 else max(1, 10 - (t - 100) // 30)},
     "the queue drains"),
    ({"requests_waiting": lambda t: 0 if t < 100 or t % 100 == 0 else 3},
     "an empty queue in between"),
])
def test_issue_29_no_verdict_when(over: dict[str, Any], why: str) -> None:
    assert _check(_stalled(700, **over)) == [], why


def test_issue_29_a_huge_prompt_in_flight_lengthens_the_window() -> None:
    huge = {"gateway_prompt_tokens_in_flight": 500_000}   # 600 s/M -> +300 s
    assert _check(_stalled(690, **huge)) == []
    assert _check(_stalled(710, **huge))


def test_issue_29_the_field_case_restarts_and_the_hang_guard_stays_quiet() -> None:
    case = load_case(CASES / "deferred_queue_never_admitted.yaml")
    steps = play_case(case)
    t, decision = first_action(steps)
    assert decision.action is Action.RESTART and 895 <= t <= 910
    finding = next(f for f in decision.findings if f.kind == "engine_admission_stall")
    assert finding.evidence["requests_waiting_deferred"] == 468
    assert finding.evidence["kv_cache_usage_ratio_max"] == 0.2
    # Prompt tokens advance all along: the token-based hang guard never sees a stall.
    assert not any(f.guard == engine_hung.GUARD for _, d in steps for f in d.findings)


def test_issue_29_the_kv_control_is_quiet_because_the_cache_is_full() -> None:
    case = load_case(CASES / "queue_in_front_of_full_kv_control.yaml")
    assert first_action(play_case(case)) is None
    # The same trace with "far from full" at 100%: the guard would call it a stall, so
    # it is the KV reading that keeps the control quiet.
    data = case.policy.model_dump(mode="json", exclude_none=True)
    data["guards"]["admission_stall"]["kv_far_from_full_ratio"] = 1.0
    loose = load_policy_from(data)
    window = Window.of(case.samples, 3600)
    sit = Situation(window, case.ladder, loose, case.samples[-1].t_s)
    assert [f.kind for f in admission_stall.check(sit)] == ["engine_admission_stall"]


def load_policy_from(data: dict[str, Any]):
    import yaml
    return load_policy(yaml.safe_dump(data))


def test_issue_29_long_generations_are_quiet_because_they_finish() -> None:
    # The control's batch is full (16 of 16), which alone keeps the guard quiet; judged
    # under a rung without a --max-num-seqs (POLICY's rung 0), its finishes every 240 s
    # still do, and the same trace without them is a stall.
    case = load_case(CASES / "long_generations_finishing_slowly_control.yaml")

    def verdicts(trace: list[Sample]) -> list[float]:
        out = []
        for i in range(len(trace)):
            part = trace[: i + 1]
            sit = Situation(Window.of(part, 900), LadderState(rung=0, since_s=0.0), POLICY,
                            part[-1].t_s)
            if admission_stall.check(sit):
                out.append(part[-1].t_s)
        return out

    assert POLICY.max_num_seqs(0) is None
    rung0 = [Sample(**{**x.to_dict(), "engine_rung": 0,
                       "engine_state": x.engine_state}) for x in case.samples]
    assert verdicts(rung0) == []
    unfinished = [Sample(**{**x.to_dict(), "requests_finished_total": 200.0,
                            "engine_state": x.engine_state}) for x in rung0]
    assert verdicts(unfinished)[0] == pytest.approx(360.0)

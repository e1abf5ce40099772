"""Issue 13: the judgement of a serving engine, beyond the field cases' first action."""

from __future__ import annotations

from supervisor.decide.decision import Action
from supervisor.decide.ladder import LadderState
from tests.helpers.field_cases import FIELD, load_case, play_case
from tests.unit.scenario import play, samples


def test_issue_13_shed_for_a_suspected_hang_is_restored_when_the_canary_answers() -> None:
    # Flat from 100 s with a request in flight; a canary on its way at 135 s (shed), which
    # answers at 150 s: the limits come back at once, not after the cooldown.
    flat = dict(iteration_tokens_count_total=2500.0, prompt_tokens_total=10000.0,
                generation_tokens_total=2500.0, requests_running=1.0, requests_waiting=0.0,
                gateway_requests_in_flight=1)
    trace = (samples(0, 100, iteration_tokens_count_total=lambda t: 25 * t,
                     prompt_tokens_total=lambda t: 100 * t,
                     generation_tokens_total=lambda t: 25 * t, requests_running=1.0,
                     requests_waiting=0.0, gateway_requests_in_flight=1)
             + samples(101, 134, **flat)
             + samples(135, 149, canary_pending=True, **flat)
             + samples(150, 160, canary_pending=False, canary_ok=True, canary_finished_s=150.0,
                       canary_latency_seconds=14.0, **flat))
    decisions, ladder = play(trace, LadderState(0))
    acted = [(s.t_s, d) for s, d in zip(trace, decisions, strict=True)
             if d.action is not Action.HOLD]
    assert [(t, d.action, d.shed) for t, d in acted] == [(135.0, Action.SHED, True),
                                                         (150.0, Action.SHED, False)]
    assert not ladder.shed and ladder.shed_kind is None


def test_issue_13_hang_on_a_huge_prompt_is_not_restarted_into_the_same_context() -> None:
    case = load_case(FIELD / "engine_hung" / "huge_prompt_hang.yaml")
    steps = play_case(case)
    moves = [(t, d) for t, d in steps if d.action not in (Action.HOLD, Action.SHED)]
    _t, d = moves[0]
    assert (d.action, case.policy.modes[d.rung].name) == (Action.STEP_DOWN, "glm-128k")
    assert d.findings[0].evidence["prompt_tokens_in_flight"] == 580000
    assert d.findings[0].evidence["stall_seconds"] == 60 + 0.58 * 600


def test_issue_13_dynamic_k_schedule_is_checked_like_vllm_reads_it() -> None:
    from supervisor.errors import PolicyError
    from supervisor.policy import load_policy
    base = """
fleet: t
engine: {executable: vllm}
modes:
  - {name: dyn, args: {--speculative-config: {method: mtp, num_speculative_tokens: 5,
                       num_speculative_tokens_per_batch_size: SCHEDULE}}}
  - {name: plain, args: {}}
"""
    ok = load_policy(base.replace("SCHEDULE", "[[1, 16, 5], [17, 256, 0]]"))
    assert ok.first_rung_sparing_large_batches_below(-1) == 0
    for bad, why in (("[[1, 16, 6]]", "k 6"), ("[[4, 2, 1]]", "range 4-2"),
                     ("[[1, 16, 5], [10, 20, 2]]", "range 10-20"), ("5", "must be a list")):
        try:
            load_policy(base.replace("SCHEDULE", bad))
        except PolicyError as exc:
            assert why in str(exc) and "num_speculative_tokens_per_batch_size" in str(exc)
        else:
            raise AssertionError(f"{bad} accepted")

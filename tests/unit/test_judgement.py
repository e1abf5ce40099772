"""Issue 13: the judgement of a serving engine, beyond the field cases' first action."""

from __future__ import annotations

import dataclasses

from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.ladder import LadderState
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
    from agent_supervisor.errors import PolicyError
    from agent_supervisor.policy import load_policy
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


def test_issue_13_calibrated_acceptance_by_position_reaches_the_lottery(tmp_path) -> None:
    from datetime import UTC, datetime

    from agent_supervisor.record.baselines import args_digest, load_acceptance
    from agent_supervisor.record.store import Store, make_engine, upgrade
    case = load_case(FIELD / "spec_launch_lottery" / "bad_launch.yaml")
    engine = make_engine(f"sqlite:///{tmp_path}/s.db")
    upgrade(engine)
    store = Store(engine, fleet="f", host="h")
    mode = case.policy.modes[0]
    for conc, pos in ((1, [0.80, 0.62, 0.47, 0.35, 0.27]), (4, [0.74, 0.58, 0.43, 0.31, 0.23])):
        store.add_baseline(mode=mode.name, args_digest=args_digest(case.policy, mode),
                           concurrency=conc, measured_at=datetime.now(UTC),
                           tokens_per_second_per_request=30.0, tokens_per_second_total=30.0,
                           ttft_seconds=0.2, acceptance_by_position=pos, peak_rss_bytes=None,
                           mem_available_min_bytes=None, seconds=20.0, requests=10)
    store.add_baseline(mode=mode.name, args_digest="another-build", concurrency=8,
                       measured_at=datetime.now(UTC), tokens_per_second_per_request=1.0,
                       tokens_per_second_total=1.0, ttft_seconds=None,
                       acceptance_by_position=[0.1] * 5, peak_rss_bytes=None,
                       mem_available_min_bytes=None, seconds=20.0, requests=1)
    acceptance = load_acceptance(store, case.policy)
    assert acceptance == {mode.name: (0.77, 0.6, 0.45, 0.33, 0.25)}
    steps = play_case(dataclasses.replace(case, acceptance=acceptance))
    t, d = next((t, d) for t, d in steps if d.action is not Action.HOLD)
    assert (t, d.action, d.rung, d.findings[0].kind) == (100.0, Action.PLANNED_RESTART, 0,
                                                         "spec_launch_lottery")


def test_issue_13_one_restart_for_a_bad_launch_then_spec_degraded() -> None:
    from agent_supervisor.decide.ladder import advance
    case = load_case(FIELD / "spec_launch_lottery" / "bad_launch.yaml")
    steps = play_case(case)
    t, d = next((t, d) for t, d in steps if d.action is not Action.HOLD)
    ladder = advance(case.ladder, d, case.policy, t)
    assert ladder.lottery_restarts == 1 and ladder.rung == 0
    again = load_case(FIELD / "spec_degraded" / "second_bad_launch.yaml")
    replayed = play_case(dataclasses.replace(again, ladder=dataclasses.replace(
        ladder, since_s=0.0, handled_run_id="r1")))
    assert all(d.action is Action.HOLD for _, d in replayed)
    assert any(f.kind == "spec_degraded" for _, d in replayed for f in d.findings)


GB10_LADDER = """
fleet: t
engine: {executable: vllm}
modes:
  - {name: mtp, args: {--speculative-config: {method: mtp, num_speculative_tokens: 3}}}
  - {name: dspark, args: {--speculative-config: {method: dspark, num_speculative_tokens: 5}}}
  - {name: nospec, args: {}}
"""


def _row(mode: str, profile: str, total: float) -> dict:
    return {"mode": mode, "profile": profile, "concurrency": 1, "tokens_per_second_total": total}


def test_issue_13_calibration_proposes_the_order_of_speculative_rungs() -> None:
    from agent_supervisor.calibrate import propose_order
    from agent_supervisor.policy import load_policy
    policy = load_policy(GB10_LADDER)
    # The GB10 report: DSpark 51.5 vs MTP 34.5 tok/s on code, MTP 24.1 vs 18.3 on long
    # essays; thinking (gain shrinks) filled in at 20.0 vs 19.0.
    rows = [_row("dspark", "code", 51.5), _row("mtp", "code", 34.5),
            _row("dspark", "long_form", 18.3), _row("mtp", "long_form", 24.1),
            _row("dspark", "thinking", 20.0), _row("mtp", "thinking", 19.0),
            _row("nospec", "code", 20.0),
            {"mode": "mtp", "concurrency": 1, "tokens_per_second_total": 99.0}]  # agent load
    diff = propose_order(rows, policy)
    assert diff is not None
    assert "-  - name: mtp\n" in diff and "+  - name: dspark   # score 0.92\n" in diff
    assert "+  - name: mtp   # score 0.87\n" in diff
    assert " - name: nospec\n" in diff                 # the plain rung stays where it is
    # A fleet of essay writers: MTP keeps the top rung, nothing to change.
    essays = [r for r in rows if r.get("profile") == "long_form"]
    assert propose_order(essays, policy) is None
    assert propose_order([_row("mtp", "code", 1.0)], policy) is None

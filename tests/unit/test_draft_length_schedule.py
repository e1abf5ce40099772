"""Issue 32 item 1: a rung's draft length by batch size (vLLM's
``num_speculative_tokens_per_batch_size`` inside ``--speculative-config``), checked as
vLLM checks it, rendered into the argument vector, refused for llama-server."""

from __future__ import annotations

import json

import pytest

from agent_supervisor.errors import PolicyError
from agent_supervisor.policy.load import load_policy
from agent_supervisor.policy.model import build_argv
from agent_supervisor.policy.speculative import check_k_schedule

VLLM = """
fleet: t
engine: {executable: vllm, kind: KIND}
modes:
  - {name: ngram, args: {--speculative-config: {method: ngram, num_speculative_tokens: 5,
                         prompt_lookup_max: 4, num_speculative_tokens_per_batch_size: SCHEDULE},
                         --max-num-seqs: 8}}
  - {name: plain, args: {--max-num-seqs: 8}}
"""


def _policy(schedule: str, kind: str = "vllm"):
    return load_policy(VLLM.replace("SCHEDULE", schedule).replace("KIND", kind))


@pytest.mark.parametrize(("schedule", "reason"), [
    ("[[0, 4, 5]]", "range 0-4 must be positive"),
    ("[[1, 4, 5], [6, 3, 0]]", "range 6-3 ends before it starts"),
    ("[[1, 4, -1]]", "k -1 for 1-4 must be 0 to num_speculative_tokens (5)"),
    ("[[1, 4, 6]]", "k 6 for 1-4 must be 0 to num_speculative_tokens (5)"),
    ("[[1, 4, 5], [4, 8, 0]]", "range 4-8 overlaps the range ending at 4"),
    ("[[2, 8, 5]]", "the first batch-size range must start at 1"),
    ("[[1, 4]]", "is not [range_start, range_end, k]"),
    ("[[1, 4, 2.5]]", "is not [range_start, range_end, k]"),
    ("[]", "must be a list"),
])
def test_issue_32_schedule_refused_as_vllm_refuses_it(schedule: str, reason: str) -> None:
    with pytest.raises(PolicyError) as err:
        _policy(schedule)
    text = str(err.value)
    assert reason in text
    assert "--speculative-config.num_speculative_tokens_per_batch_size" in text


def test_issue_32_schedule_in_any_order_is_sorted_as_vllm_sorts_it() -> None:
    # vLLM sorts the ranges by start before checking them; gaps keep the earlier k.
    assert check_k_schedule([[5, 8, 0], [1, 2, 5]], 5) == [(1, 2, 5), (5, 8, 0)]
    policy = _policy("[[5, 8, 0], [1, 2, 5]]")
    # The largest batch sizes get k 0: the rung spares large batches.
    assert policy.first_rung_sparing_large_batches_below(-1) == 0


def test_issue_32_schedule_reaches_the_argv_as_json() -> None:
    policy = _policy("[[1, 2, 5], [3, 4, 2], [5, 8, 0]]")
    argv = build_argv(policy, policy.modes[0])
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4,
                    "num_speculative_tokens_per_batch_size": [[1, 2, 5], [3, 4, 2], [5, 8, 0]]}
    assert policy.modes[0].speculative and not policy.modes[1].speculative


def test_issue_32_llama_server_refuses_a_schedule_naming_the_field() -> None:
    text = VLLM.replace("SCHEDULE", "[[1, 2, 5], [3, 8, 0]]").replace("KIND", "llama_cpp")
    text = text.replace("--max-num-seqs", "--parallel")
    with pytest.raises(PolicyError) as err:
        load_policy(text)
    msg = str(err.value)
    assert "modes[0].args" in msg and "num_speculative_tokens_per_batch_size" in msg
    assert "llama-server has no draft length by batch size" in msg
    assert "--spec-draft-n-max" in msg
    # Its own draft limits stay accepted, and refused when negative.
    ok = load_policy(text.replace(
        "--speculative-config: {method: ngram, num_speculative_tokens: 5,\n"
        "                         prompt_lookup_max: 4, num_speculative_tokens_per_batch_size:"
        " [[1, 2, 5], [3, 8, 0]]}",
        "--spec-type: ngram-mod, --spec-draft-n-max: 8, --spec-draft-n-min: 2"))
    assert ok.modes[0].speculative
    with pytest.raises(PolicyError, match="--spec-draft-n-max must be an integer >= 0"):
        load_policy(text.replace(
            "--speculative-config: {method: ngram, num_speculative_tokens: 5,\n"
            "                         prompt_lookup_max: 4, num_speculative_tokens_per_batch_size:"
            " [[1, 2, 5], [3, 8, 0]]}",
            "--spec-type: ngram-mod, --spec-draft-n-max: -1"))


# --- calibrate's proposal (agent_supervisor.calibrate.py) ---

def _rows(table: dict[int, dict[int, float]]) -> list[dict]:
    return [{"k": k, "concurrency": c, "tokens_per_second_per_request": v}
            for k, per in table.items() for c, v in per.items()]


def test_issue_32_proposal_takes_the_best_k_at_each_load() -> None:
    from agent_supervisor.calibrate import propose_k_schedule
    # K=5 at 1 and K=0 at 6 are the README's n-gram figures on this box (287 vs 144,
    # 68 vs 100 tokens/s per request); the 2- and 4-request values are made up.
    rows = _rows({0: {1: 144.0, 2: 130.0, 4: 112.0, 6: 100.0},
                  2: {1: 210.0, 2: 180.0, 4: 120.0, 6: 90.0},
                  5: {1: 287.0, 2: 190.0, 4: 100.0, 6: 68.0}})
    p = propose_k_schedule(rows, fixed_k=5, max_batch=8)
    assert p.best_k == {1: 5, 2: 5, 4: 2, 6: 0}
    assert p.schedule == [[1, 3, 5], [4, 5, 2], [6, 8, 0]]
    assert p.max_k == 5
    assert p.predicted_gain[1] == 1.0
    assert p.predicted_gain[4] == pytest.approx(120.0 / 100.0)
    assert p.predicted_gain[6] == pytest.approx(100.0 / 68.0)
    # The proposal passes vLLM's own rules.
    assert check_k_schedule(p.schedule, p.max_k)


def test_issue_32_proposal_keeps_the_smaller_k_on_a_tie_and_needs_no_schedule() -> None:
    from agent_supervisor.calibrate import TIE_RATIO, propose_k_schedule
    near = 200.0 * (1 - TIE_RATIO / 2)
    rows = _rows({0: {1: 100.0, 4: 90.0}, 3: {1: near, 4: 150.0}, 5: {1: 200.0, 4: 120.0}})
    p = propose_k_schedule(rows, fixed_k=5)
    assert p.best_k == {1: 3, 4: 3} and p.schedule is None
    assert p.predicted_gain[4] == pytest.approx(150.0 / 120.0)


def test_issue_32_proposal_refuses_a_sweep_with_holes() -> None:
    from agent_supervisor.calibrate import propose_k_schedule
    rows = _rows({0: {1: 100.0, 4: 90.0}, 5: {1: 200.0}})
    with pytest.raises(ValueError, match=r"missing \(K, concurrency\): \[\(5, 4\)\]"):
        propose_k_schedule(rows, fixed_k=5)
    with pytest.raises(ValueError, match="the fixed K 3"):
        propose_k_schedule(_rows({0: {1: 1.0}, 5: {1: 2.0}}), fixed_k=3)


def test_issue_32_sweep_variants_and_the_proposal_rung() -> None:
    from agent_supervisor.calibrate import k_variants, propose_k_schedule
    policy = _policy("[[1, 8, 5]]")
    sweep = k_variants(policy, "ngram", [0, 2, 5])
    assert [m.name for m in sweep.modes] == ["ngram-k0", "ngram-k2", "ngram-k5"]
    assert not sweep.modes[0].speculative
    argv = build_argv(sweep, sweep.modes[1])
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4}
    assert "--max-num-seqs" in argv
    p = propose_k_schedule(_rows({0: {1: 1.0, 6: 3.0}, 5: {1: 2.0, 6: 1.0}}), 5, 8)
    rung = k_variants(policy, "ngram", [0, 5], p)
    argv = build_argv(rung, rung.modes[0])
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 3, 5], [4, 8, 0]]
    with pytest.raises(ValueError, match="needs a vLLM mode with --speculative-config"):
        k_variants(policy, "plain", [0, 2])


def test_issue_32_verdict_keeps_the_fixed_k_unless_the_schedule_measured_better() -> None:
    from agent_supervisor.calibrate import proposal_verdict
    # Measured on this box (tests/integration/test_draft_lengths_real.py, n-gram
    # K=5 with [[1,1,5],[2,3,0],[4,6,5]]): 0.98x, 1.08x, 0.66x, 0.35x the fixed K.
    text = proposal_verdict({1: 0.98, 2: 1.08, 4: 0.66, 6: 0.35}, 5)
    assert text.startswith("verdict: keep the fixed K=5") and "at 4, 6 concurrent" in text
    assert proposal_verdict({1: 1.0, 6: 1.4}, 5) == (
        "verdict: use the schedule: better at 6 concurrent, no worse elsewhere")
    assert "no measured gain" in proposal_verdict({1: 1.02, 6: 0.97}, 5)
    assert "did not run" in proposal_verdict({}, 5)

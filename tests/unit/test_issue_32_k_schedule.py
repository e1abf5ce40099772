"""Issue 32 item 1: a rung's draft length by batch size (vLLM's
``num_speculative_tokens_per_batch_size`` inside ``--speculative-config``), checked as
vLLM checks it, rendered into the argument vector, refused for llama-server."""

from __future__ import annotations

import json

import pytest

from agent_supervisor.errors import PolicyError
from agent_supervisor.policy import build_argv, load_policy
from agent_supervisor.policy_spec import check_k_schedule

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

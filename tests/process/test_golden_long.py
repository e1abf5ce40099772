"""Issue 29 item 2, the long-context golden canary, against real processes: the sensors
send the short golden prompt and a long one (``long_prompt_tokens``, measured with the
engine's ``/tokenize``) to the stand-in engine over HTTP where its context allows it
(``--max-model-len``, reported as vLLM reports it in ``/v1/models`` and ``/tokenize``),
record both answers under their own keys, and report a mismatch when only the long
answer goes wrong (output corrupted at long context: vllm #36872); with a 1,024-token
context the long one is skipped and the note says so."""

from __future__ import annotations

import json
from pathlib import Path

from agent_supervisor.sense.golden import STORE_NAME
from agent_supervisor.sense.golden_long import build_long_prompt, mode_context
from agent_supervisor.telemetry.sample import Sample
from tests.helpers.policies import fake_engine_policy
from tests.helpers.sensors import sample_until

QUICK = {"probe_timeout_seconds": 1.0,
         "golden_canary": {"interval_seconds": 0.5, "timeout_seconds": 5.0}}


async def ticks(tmp_path: Path, fake_args: list[str], seconds: float, until) -> list[Sample]:
    """Sample the stand-in engine until ``until(sample)`` or ``seconds``."""
    samples, _ = await sample_until(tmp_path, fake_args, seconds, QUICK, until)
    return samples


async def test_issue_29_long_canary_catches_output_wrong_only_at_long_context(
        tmp_path: Path) -> None:
    short, long_ = tmp_path / "short.txt", tmp_path / "long.txt"
    short.write_text(" four, five, six, seven")
    long_.write_text(" four, five, six, seven")
    args = ["--completion-text-file", str(short), "--long-text-file", str(long_),
            "--max-model-len", "8192"]
    good = await ticks(tmp_path, args, 10.0, lambda s: s.golden_canary_match is True)
    notes = [s.golden_canary_note for s in good if s.golden_canary_note]
    assert "long canary of" in notes[0] and "/v1/models max_model_len" in notes[0]
    assert good[-1].golden_canary_match is True
    policy = fake_engine_policy(tmp_path, fake_args=args, sampling=QUICK)
    entries = list(json.loads((policy.state_directory / STORE_NAME).read_text()).values())
    assert len(entries) == 2                   # the short answer and the long one
    tokens = [e["prompt_tokens"] for e in entries if "prompt_tokens" in e]
    assert len(tokens) == 1 and 2700 <= tokens[0] <= 3000       # /tokenize's count
    # The long answer alone goes wrong: a mismatch, confirmed at once.
    long_.write_text(" xq xq xq !!")
    bad = await ticks(tmp_path, args, 10.0, lambda s: (s.golden_canary_mismatches or 0) >= 2)
    assert bad[-1].golden_canary_match is False and bad[-1].golden_canary_mismatches == 2
    assert "got ' xq xq xq !!'" in bad[-1].golden_canary_note


async def test_issue_29_long_canary_skipped_when_the_context_is_too_small(
        tmp_path: Path) -> None:
    args = ["--completion-text", " four, five"]           # the stand-in's 1,024 tokens
    got = await ticks(tmp_path, args, 8.0, lambda s: s.golden_canary_note is not None)
    note = got[-1].golden_canary_note
    assert "long canary skipped: a context of 1024 tokens (/v1/models max_model_len) " \
           "leaves 944 for the prompt, under 1024" in note
    policy = fake_engine_policy(tmp_path, fake_args=args, sampling=QUICK)
    assert len(json.loads((policy.state_directory / STORE_NAME).read_text())) == 1


def test_issue_29_long_prompt_is_deterministic_and_the_argv_context_is_read() -> None:
    a, b = build_long_prompt(200, "one, two,"), build_long_prompt(200, "one, two,")
    assert a == b and a.endswith("one, two,") and a.startswith("1. Item one of")
    assert "200. Item two zero zero of" in a
    assert mode_context(["-m", "x", "--max-model-len", "4096"]) == 4096
    assert mode_context(["--ctx-size=8192"]) == 8192 and mode_context(["-c", "512"]) == 512
    assert mode_context(["--model", "m"]) is None

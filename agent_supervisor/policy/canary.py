"""Policy section ``sampling.golden_canary``: a fixed greedy prompt whose answer is known.

A probe that answers 200 says nothing about what the engine answers: speculation that
produces garbage at long context on some builds (vllm #36872: MTP on Qwen3.5, acceptance
from 61% to 0.9% and incoherent text; vllm #10559: gibberish after some tokens without
eager mode), a KV-cache fault. The golden canary sends one greedy completion
(temperature 0, a fixed seed and ``max_tokens``) and compares its text with the answer the
same model, mode and engine version gave before (agent_supervisor/sense/golden.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agent_supervisor.policy.base import Count, PolicyModel, Seconds

__all__ = ["GOLDEN_PROMPT", "GoldenCanarySpec"]

#: The default prompt: a continuation every text model gets the same way each time under
#: greedy decoding, short enough to cost one prefill of a few tokens.
GOLDEN_PROMPT = "Count from one to twenty in words: one, two, three,"


class GoldenCanarySpec(PolicyModel):
    """When and how the golden canary is sent (``sampling.golden_canary``)."""

    enabled: bool = True
    """Send it: once the engine serves (each run), after any change of rung, and every
    ``interval_seconds`` while calm. False: never (nothing recorded, nothing judged)."""
    interval_seconds: Seconds = 900.0
    """While calm (no stall suspected), one golden canary this often (seconds). 15 min:
    one short greedy request is noise beside an agent fleet's load."""
    prompt: Annotated[str, Field(min_length=1, max_length=8000)] = GOLDEN_PROMPT
    """The prompt (``/v1/completions``, no chat template). Changing it records a new
    golden answer (the prompt is part of the key)."""
    max_tokens: Annotated[int, Field(ge=1, le=512)] = 16
    """Tokens of the answer. Greedy answers of fp16/bf16 models can part ways after many
    tokens under different batch shapes; 16 keeps the comparison to the part that does
    not, while a corrupted engine is wrong from the first tokens."""
    compare_chars: Annotated[int, Field(ge=0, le=100_000)] = 24
    """Characters at the start of the answer that must equal the golden answer's (0: the
    whole answer). vLLM is not batch-invariant by default (``VLLM_BATCH_INVARIANT=1``
    makes it so: docs.vllm.ai/en/v0.32.0/features/batch_invariance): under other batch
    sizes the
    kernels change and a greedy answer can part ways where two tokens were nearly tied,
    usually after several tokens; corrupted output (gibberish) is wrong from the first
    ones. 24 characters are the first few tokens."""
    long_prompt_tokens: Annotated[int, Field(ge=0, le=1_000_000)] = 3000
    """A second golden prompt of about this many tokens (a numbered list ending with
    ``prompt``), sent with the short one where the run's context allows it (the engine's
    ``max_model_len``, else the mode's ``--max-model-len``/``--ctx-size``: cut to fit,
    skipped with a note when under 1,024 tokens would be left); 0: never. Corrupted
    output can show only at long context (vllm #36872)."""
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    """The request's ``seed`` (greedy decoding does not sample; set for engines that
    would)."""
    timeout_seconds: Seconds = 30.0
    """A golden canary not answered within this long is no verdict on the answer (the
    engine-hung guard judges a stall)."""
    mismatches: Annotated[Count, Field(le=10)] = 2
    """Mismatches in a row, in one run, before the answer is judged corrupted output (the
    next canary goes out at once after a mismatch, to confirm it)."""

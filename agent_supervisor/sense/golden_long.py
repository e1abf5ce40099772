"""The golden canary's long-context prompt, where the run's context allows it (issue 29).

Corrupted output often shows only at long context (vllm #36872: MTP's acceptance falling
from 61% to 0.9% with incoherent text at long context on some builds), so beside the
short golden prompt a second one of ``sampling.golden_canary.long_prompt_tokens`` tokens
(3,000 by default) is sent with it, answered greedily and compared the same way, under
its own key (the prompt is part of the key).

- **the text**: deterministic, a numbered list (``"1. Item one of the golden canary's
  long context."`` ...) ending with the short prompt, whose continuation is then the
  answer: the same kind of answer, after thousands of tokens of context;
- **its length**: measured with the engine's own tokenizer (``POST /tokenize``: vLLM's
  ``count``, llama-server's ``tokens``), else estimated at 4 bytes a token, and cut to
  fit: at most ``long_prompt_tokens`` and at most the run's context less ``max_tokens``
  and ``CONTEXT_MARGIN_TOKENS``;
- **the run's context**: vLLM's ``GET /v1/models`` ``max_model_len``, llama-server's
  ``GET /props`` ``default_generation_settings.n_ctx``, the ``/tokenize`` answer's
  ``max_model_len``, else the mode's own ``--max-model-len`` / ``--ctx-size`` / ``-c``;
  unknown, or leaving fewer than ``LONG_MIN_TOKENS`` for the prompt: the long canary is
  skipped and the note says why (the demo's 1,024-token modes, for instance).
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["CONTEXT_MARGIN_TOKENS", "LONG_MIN_TOKENS", "build_long_prompt", "context_length",
           "long_prompt", "mode_context"]

#: Tokens kept free between the long prompt plus its answer and the context's end (a chat
#: template or BOS token the count did not see).
CONTEXT_MARGIN_TOKENS = 64
#: A "long" prompt shorter than this says nothing the short one does not: skipped.
LONG_MIN_TOKENS = 1024
#: Bytes a token when the engine cannot count (gateway/prompt.py's estimate).
BYTES_PER_TOKEN = 4
_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def build_long_prompt(lines: int, tail: str) -> str:
    """``lines`` numbered lines, then ``tail`` (the short golden prompt). Deterministic."""
    body = "".join(f"{i}. Item {' '.join(_WORDS[int(d)] for d in str(i))} of the golden "
                   "canary's long context.\n" for i in range(1, lines + 1))
    return body + tail


def mode_context(argv: list[str]) -> int | None:
    """The context the argv sets (``--max-model-len N``, ``--ctx-size N``, ``-c N``, either
    spelling), or None."""
    flags = ("--max-model-len", "--ctx-size", "-c")
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in flags and not eq and i + 1 < len(argv):
            value = argv[i + 1]
        elif name not in flags:
            continue
        try:
            return int(value)
        except ValueError:
            return None
    return None


async def _json(client: httpx.AsyncClient, method: str, url: str, timeout_s: float,
                body: dict[str, Any] | None = None) -> Any:
    try:
        resp = await client.request(method, url, json=body, timeout=timeout_s)
        return resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


async def context_length(client: httpx.AsyncClient, base_url: str, model: str,
                         argv: list[str], timeout_s: float) -> tuple[int | None, str]:
    """(the run's context in tokens, where it was read), or (None, "unknown")."""
    models = await _json(client, "GET", base_url + "/v1/models", timeout_s)
    try:
        value = models["data"][0].get("max_model_len")
        if isinstance(value, int) and value > 0:
            return value, "/v1/models max_model_len"
    except (TypeError, KeyError, IndexError, AttributeError):
        pass
    props = await _json(client, "GET", base_url + "/props", timeout_s)
    try:
        value = props["default_generation_settings"]["n_ctx"]
        if isinstance(value, int) and value > 0:
            return value, "/props n_ctx"
    except (TypeError, KeyError):
        pass
    tok = await _json(client, "POST", base_url + "/tokenize", timeout_s,
                      {"model": model, "prompt": "0"})
    value = tok.get("max_model_len") if isinstance(tok, dict) else None
    if isinstance(value, int) and value > 0:
        return value, "/tokenize max_model_len"
    value = mode_context(argv)
    return (value, "the mode's argv") if value else (None, "unknown")


async def _count(client: httpx.AsyncClient, base_url: str, model: str, text: str,
                 timeout_s: float) -> int:
    """Tokens of ``text`` by the engine's tokenizer, else the byte estimate."""
    tok = await _json(client, "POST", base_url + "/tokenize", timeout_s,
                      {"model": model, "prompt": text})
    if isinstance(tok, dict):
        if isinstance(tok.get("count"), int):
            return int(tok["count"])
        if isinstance(tok.get("tokens"), list):
            return len(tok["tokens"])
    return len(text.encode()) // BYTES_PER_TOKEN + 1


async def long_prompt(client: httpx.AsyncClient, base_url: str, model: str, argv: list[str],
                      *, want_tokens: int, max_tokens: int, tail: str,
                      timeout_s: float) -> tuple[str | None, int, str]:
    """(the long prompt, its tokens, a note); (None, 0, why) when skipped: the context is
    unknown or leaves fewer than ``LONG_MIN_TOKENS``."""
    ctx, where = await context_length(client, base_url, model, argv, timeout_s)
    if ctx is None:
        return None, 0, "long canary skipped: the run's context length is unknown"
    target = min(want_tokens, ctx - max_tokens - CONTEXT_MARGIN_TOKENS)
    if target < LONG_MIN_TOKENS:
        return None, 0, (f"long canary skipped: a context of {ctx} tokens ({where}) leaves "
                         f"{max(target, 0)} for the prompt, under {LONG_MIN_TOKENS}")
    lines = max(1, target // 16)
    text = build_long_prompt(lines, tail)
    count = await _count(client, base_url, model, text, timeout_s)
    for _ in range(3):               # scale to the measured tokens a line, then trim
        if count <= target and count >= 0.9 * target:
            break
        lines = max(1, int(lines * target / max(count, 1) * (0.97 if count > target else 1)))
        text = build_long_prompt(lines, tail)
        count = await _count(client, base_url, model, text, timeout_s)
    if count > target:
        return None, 0, f"long canary skipped: could not fit {target} tokens ({count})"
    return text, count, f"long canary of {count} tokens (context {ctx}, {where})"

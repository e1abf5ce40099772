"""A generation past its ``max_tokens``: counted at the gateway and ended there (issue 29).

llama-server can ignore the request's ``max_tokens``/``n_predict`` once a context shift
has happened: ``shift_context()`` moved the slot's position but not the position where
generation must stop, so the stop condition never triggers and the slot generates
repeated spans until the client times out (ggml-org/llama.cpp #25026, like #18432; an
endless generation near the context window with EAGLE-3 in vLLM: vllm #21269). Every
probe stays green. The gateway knows what the client asked for and counts what it
streams, so it can end such an answer and record it.

The count is approximate, and only ever low:

- a streamed answer is counted one token per SSE event that carries output (text, a
  chat ``delta`` with content, reasoning or a tool call, an Anthropic
  ``content_block_delta``, a Responses ``response.output_text.delta``): vLLM and
  llama-server send one event per token without speculation; with speculation one event
  can carry several tokens (shared/CPU_ENGINE.md), so events undercount;
- an engine's own ``usage`` (``completion_tokens``, Anthropic ``output_tokens``), when an
  event or the whole answer carries it, replaces the estimate when it is higher.

So an answer is ended only when it is *clearly* past what was asked: more than
``max_tokens`` plus ``gateway.overrun_margin_tokens`` and plus
``gateway.overrun_margin_ratio`` of ``max_tokens``. An answer within its ``max_tokens``,
however long, is never touched (the control). A request that names no limit (llama.cpp's
``n_predict`` -1: unbounded) has none here either.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["LIMIT_FIELDS", "TokenCount", "answer_limit", "requested_max_tokens"]

#: Body fields that bound the answer's tokens, the first present wins: OpenAI chat
#: (``max_completion_tokens`` replaced ``max_tokens``), completions and Anthropic messages
#: (``max_tokens``), the Responses API (``max_output_tokens``), llama.cpp's native
#: ``/completion`` (``n_predict``; tools/server/README.md).
LIMIT_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens", "n_predict")


def requested_max_tokens(body: dict[str, Any]) -> int | None:
    """The answer's token bound the request asked for, or None (absent, negative: llama.cpp's
    -1 is unbounded, -2 is until the context is full; not an integer)."""
    for name in LIMIT_FIELDS:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return None
        return value
    return None


def answer_limit(body: dict[str, Any], *, margin_tokens: int,
                 margin_ratio: float) -> int | None:
    """Counted tokens past which the answer to ``body`` is ended: ``max_tokens`` +
    ``margin_tokens`` + ``ceil(max_tokens * margin_ratio)``; None: no bound asked for."""
    asked = requested_max_tokens(body)
    if asked is None:
        return None
    return asked + margin_tokens + math.ceil(asked * margin_ratio)


def _usage_tokens(data: dict[str, Any]) -> int | None:
    """``usage.completion_tokens`` (OpenAI), ``usage.output_tokens`` (Anthropic,
    Responses), at the top level or in an Anthropic ``message``/Responses ``response``."""
    for holder in (data, data.get("message"), data.get("response")):
        usage = holder.get("usage") if isinstance(holder, dict) else None
        if not isinstance(usage, dict):
            continue
        for name in ("completion_tokens", "output_tokens"):
            value = usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _carries_output(ev: dict[str, Any]) -> bool:
    """Whether one SSE event carries output tokens (see the module docstring)."""
    choices = ev.get("choices")
    for ch in choices if isinstance(choices, list) else ():
        if not isinstance(ch, dict) or ch.get("index", 0) != 0:
            continue
        if isinstance(ch.get("text"), str) and ch["text"]:
            return True
        delta = ch.get("delta")
        if isinstance(delta, dict) and any(
                delta.get(k) for k in ("content", "reasoning_content", "reasoning",
                                       "tool_calls")):
            return True
    kind = ev.get("type")
    return (kind == "content_block_delta" and isinstance(ev.get("delta"), dict)) or (
        kind == "response.output_text.delta" and isinstance(ev.get("delta"), str))


class TokenCount:
    """One answer's output tokens as the gateway counts them, against its ``limit``
    (None: no bound). ``past`` turns True once, when the count exceeds the limit."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.tokens = 0
        """Events with output, or the engine's own usage when higher."""
        self.past = False

    def event(self, ev: dict[str, Any]) -> bool:
        """Count one parsed SSE event; True the first time the answer is past its limit."""
        if _carries_output(ev):
            self.tokens += 1
        used = _usage_tokens(ev)
        if used is not None and used > self.tokens:
            self.tokens = used
        return self._check()

    def whole(self, data: dict[str, Any]) -> bool:
        """A whole (non-streamed) answer: its ``usage``; True when past the limit (it
        cannot be ended any more, only recorded)."""
        used = _usage_tokens(data)
        if used is not None:
            self.tokens = max(self.tokens, used)
        return self._check()

    def _check(self) -> bool:
        if self.past or self.limit is None or self.tokens <= self.limit:
            return False
        self.past = True
        return True

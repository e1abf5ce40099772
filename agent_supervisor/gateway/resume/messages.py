"""Anthropic Messages streams carried across a crash, continued on /v1/completions.

**From token ids.** vLLM 0.32.0 renders an Anthropic request with a trailing assistant
message as a new turn after it (anthropic/serving.py ``_build_base_request`` sets
neither ``continue_final_message`` nor ``add_generation_prompt``, and
chat_completion/protocol.py lets neither be set through ``chat_template_kwargs``):
measured on the CPU engine, a prefill of "I will" came back as "I will ..." again, 7
prompt tokens longer. So the gateway asks the new engine's ``/tokenize`` for the
request's chat prompt (the same messages and system prompt, ``add_generation_prompt:
true``) and for the ids of the text sent (``add_special_tokens: false``), checks the
prompt's count against the first part's ``message_start`` ``input_tokens`` (another
count means another rendering: not resumed), and continues on ``/v1/completions`` with
``prompt = prompt ids + text ids`` and the request's sampling fields; its chunks become
``content_block_delta`` events of the open text block, then ``content_block_stop``,
``message_delta`` (stop reason mapped as anthropic/serving.py
``_to_anthropic_stop_reason`` does, output tokens summed) and ``message_stop``. The ids
of the text sent come from re-tokenizing it (the Messages stream carries none), exact
where the model's tokens are the tokenizer's own split of their text.

Not resumed (an error event in Anthropic's shape instead): requests with tools, thinking,
a structured output format or content that is not text, and a stream cut inside a tool
use or thinking block.

Cuts: ``event: error`` (vLLM's converter sends it when the chat stream it reads breaks:
anthropic/serving.py ``message_stream_converter``), a ``message_delta`` with
``stop_reason: null`` (an ``abort`` finish; the ``content_block_stop`` before it is held
back so the text block stays open), or a connection that breaks or ends before
``message_stop``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from agent_supervisor.gateway.prompt import tokenize_ids
from agent_supervisor.gateway.resume.resumption import COMPLETIONS, Dialect, Resumption, StreamTap
from agent_supervisor.gateway.resume.sse import (
    StreamState,
    as_dict,
    as_list,
    event_data,
    split_events,
    sse_event,
)

__all__ = ["MESSAGES", "MessagesDialect", "plan_messages"]

MESSAGES = "/v1/messages"
#: Anthropic request fields that mean the same on /v1/completions (anthropic/serving.py
#: ``_build_base_request``: stop_sequences becomes ``stop``).
_MESSAGES_SAMPLING = ("temperature", "top_p", "top_k")


def _text_blocks(content: Any) -> bool:
    return isinstance(content, str) or (isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        for b in content))


def plan_messages(body: dict[str, Any], raw: bytes) -> Resumption:
    """The plan for a streaming Anthropic messages request (``unsupported``: why not)."""
    why = None
    messages = body.get("messages")
    thinking = body.get("thinking")
    if body.get("tools") or body.get("tool_choice"):
        why = "it offers tools"
    elif isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"):
        why = "it asks for thinking"
    elif body.get("output_config") or body.get("output_format"):
        why = "it asks for a structured output format"
    elif not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and m.get("role") in ("user", "assistant")
            and _text_blocks(m.get("content")) for m in messages):
        why = "its messages are not all text"
    elif body.get("system") is not None and not _text_blocks(body["system"]):
        why = "its system prompt is not text"
    plan = Resumption(MESSAGES, body, raw, dialect=MessagesDialect())
    if why is not None:
        plan.unsupported = f"not resumed: {why}"
        return plan
    return _MessagesResumption(MESSAGES, body, raw, dialect=MessagesDialect(),
                               continues_as_self=False)


class _MessagesResumption(Resumption):
    """An Anthropic stream continued on /v1/completions from token ids."""

    async def build(self, tap: StreamTap, client: httpx.AsyncClient,
                    base_url: str) -> bytes | None:
        state = tap.state()
        body, model = self.body, self.body.get("model")
        chat: list[dict[str, Any]] = []
        if body.get("system"):
            chat.append({"role": "system", "content": body["system"]})
        chat += [{"role": m["role"], "content": m["content"]} for m in body["messages"]]
        prompt = await tokenize_ids(client, base_url, {
            "model": model, "messages": chat, "add_generation_prompt": True})
        expected = state.extra.get("input_tokens")
        if prompt is None or (isinstance(expected, int) and len(prompt) != expected):
            self.unsupported = ("not resumed: the engine renders this request's prompt as "
                                f"{None if prompt is None else len(prompt)} tokens, the "
                                f"first part as {expected}")
            return None
        sent = await tokenize_ids(client, base_url, {
            "model": model, "prompt": state.text, "add_special_tokens": False}) \
            if state.text else []
        if sent is None:
            return None
        tap.counted = len(sent)
        cont: dict[str, Any] = {k: body[k] for k in _MESSAGES_SAMPLING if k in body}
        if body.get("stop_sequences"):
            cont["stop"] = body["stop_sequences"]
        cont.update(model=model, prompt=prompt + sent, stream=True,
                    stream_options={"include_usage": True},
                    max_tokens=max(1, _int(body.get("max_tokens"), 1) - len(sent)))
        self.continuation_path = COMPLETIONS
        return json.dumps(cont).encode()


def _int(value: Any, default: int) -> int:
    """``value`` if it is an integer (not a bool), else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


class MessagesDialect(Dialect):
    """Anthropic's Messages stream (vLLM's anthropic/serving.py events)."""

    def __init__(self) -> None:
        self._base = StreamState()
        self._stop: tuple[str | None, str | None] = ("end_turn", None)
        self._ended = False

    def hold(self, out: bytes, pending: bytes) -> tuple[bytes, bytes]:
        if b"content_block_stop" not in out:    # every delta: no JSON parsed
            return out, pending
        parts = split_events(out)
        if parts and (event_data(parts[-1]) or {}).get("type") == "content_block_stop":
            return b"".join(parts[:-1]), parts[-1] + pending
        return out, pending

    def cut(self, out: bytes) -> int:
        if b"error" not in out and b"message_delta" not in out:   # every delta: no parse
            return -1
        at, parts = 0, split_events(out)
        for i, event in enumerate(parts):
            ev = event_data(event) or {}
            delta: dict[str, Any] = ev["delta"] if isinstance(ev.get("delta"), dict) else {}
            if ev.get("type") == "error" or event.startswith(b"event: error"):
                return at
            if ev.get("type") == "message_delta" and "stop_reason" in delta and \
                    delta["stop_reason"] is None:
                prev = event_data(parts[i - 1]) if i else None
                return at - len(parts[i - 1]) if prev and \
                    prev.get("type") == "content_block_stop" else at
            at += len(event)
        return -1

    def finished(self, out: bytes) -> bool:
        return b"event: message_stop" in out or b'"type":"message_stop"' in out

    def state(self, sent: list[dict[str, Any]]) -> StreamState:
        s = StreamState()
        s.extra["open"] = None
        s.extra["blocks"] = 0
        for ev in sent:
            kind = ev.get("type")
            if kind == "message_start" and isinstance(ev.get("message"), dict):
                s.id = ev["message"].get("id")
                usage = as_dict(ev["message"].get("usage"))
                s.extra["input_tokens"] = usage.get("input_tokens")
            elif kind == "content_block_start":
                block = as_dict(ev.get("content_block"))
                s.tool_call |= block.get("type") in ("tool_use", "server_tool_use")
                s.reasoning |= block.get("type") in ("thinking", "redacted_thinking")
                s.extra["open"] = _int(ev.get("index"), s.extra["blocks"])
                s.extra["blocks"] = s.extra["open"] + 1
            elif kind == "content_block_stop":
                s.extra["open"] = None
            elif kind == "content_block_delta":
                delta = as_dict(ev.get("delta"))
                if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                    s.text += delta["text"]
                    s.tokens += 1
                s.tool_call |= delta.get("type") == "input_json_delta"
                s.reasoning |= delta.get("type") == "thinking_delta"
        return s

    def begin(self, base: StreamState) -> None:
        self._base, self._stop, self._ended = base, ("end_turn", None), False

    def rewrite(self, tap: StreamTap, out: bytes) -> bytes:
        """/v1/completions chunks as the Anthropic events that continue the stream."""
        base, res = self._base, []
        for event in split_events(out):
            if event.startswith(b"data: [DONE]"):
                if not self._ended:
                    res.append(self._end(None))
                res.append(sse_event("message_stop", {"type": "message_stop"}))
                continue
            ev = event_data(event)
            if ev is None:
                res.append(event)                    # an SSE comment: passed on
                continue
            for ch in as_list(ev.get("choices")):
                text = ch.get("text") if isinstance(ch, dict) else None
                if isinstance(text, str) and text:
                    if base.extra.get("open") is None:
                        base.extra["open"] = base.extra.get("blocks", 0)
                        base.extra["blocks"] = base.extra["open"] + 1
                        res.append(sse_event("content_block_start", {
                            "type": "content_block_start", "index": base.extra["open"],
                            "content_block": {"type": "text", "text": ""}}))
                    res.append(sse_event("content_block_delta", {
                        "type": "content_block_delta", "index": base.extra["open"],
                        "delta": {"type": "text_delta", "text": text}}))
                finish = ch.get("finish_reason") if isinstance(ch, dict) else None
                if finish == "length":
                    self._stop = ("max_tokens", None)
                elif finish == "stop" and isinstance(ch.get("stop_reason"), str):
                    self._stop = ("stop_sequence", ch["stop_reason"])
            usage = ev.get("usage")
            if not ev.get("choices") and isinstance(usage, dict) and not self._ended:
                res.append(self._end(_int(usage.get("completion_tokens"), 0)))
        return b"".join(res)

    def _end(self, completion_tokens: int | None) -> bytes:
        """The open block's stop and the ``message_delta`` with summed usage."""
        base, out = self._base, b""
        if base.extra.get("open") is not None:
            out += sse_event("content_block_stop", {"type": "content_block_stop",
                                               "index": base.extra["open"]})
            base.extra["open"] = None
        self._ended = True
        sent = base.tokens
        usage = {"input_tokens": base.extra.get("input_tokens") or 0,
                 "output_tokens": sent + int(completion_tokens or 0)}
        return out + sse_event("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": self._stop[0],
                                               "stop_sequence": self._stop[1]},
            "usage": usage})

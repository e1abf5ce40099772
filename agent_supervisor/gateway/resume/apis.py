"""Which continuation a cut stream gets, by path (``plan_stream``), and the Responses API's.

The client sees one unbroken stream in its own API's shape. OpenAI's chat and text
completions: agent_supervisor/gateway/resume/resumption.py. Anthropic's ``/v1/messages``: on
/v1/completions from token ids, agent_supervisor/gateway/resume/messages.py.

``/v1/responses``: **text-level, natively.** vLLM 0.32.0 continues a final assistant
message whose status is ``incomplete`` (entrypoints/openai/responses/utils.py
``should_continue_final_message``: ``add_generation_prompt=False,
continue_final_message=True``), so the continuation is the same request with the text
sent appended to ``input`` as such a message (a string ``input`` becomes a user message
first) and ``max_output_tokens`` reduced by the tokens sent (the new engine's
``/tokenize`` of that text). Its events are renumbered after the client's last
``sequence_number``, carry the first part's response and item ids, its opening events
(``response.created``, ``response.in_progress``, and the message item's
``output_item.added``/``content_part.added``) are dropped, and its ``*.done`` events and
``response.completed`` hold the whole text with usage summed. Measured on the CPU engine
(greedy, tests/integration/test_gateway_real.py): the resumed answer equalled the
uninterrupted one, text and usage. Its limit: the text holds no special token the engine
left out of it (``skip_special_tokens``), so a continuation cannot see those; measured
with ``ignore_eos`` past the model's end of turn, 6,591 chars against 6,511.

Not resumed (ended with an error event, as any other cut): requests with tools,
reasoning, a structured output format, logprobs or extra output (``include``), a
``previous_response_id`` (the restarted engine no longer holds it) or ``background``;
and a stream cut inside a function call or reasoning item.

Cuts: an ``error`` or ``response.failed`` event, a ``response.completed`` whose status
is ``cancelled`` (an abort), or a connection that breaks or ends before
``response.completed``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from agent_supervisor.gateway.resume.messages import MESSAGES, plan_messages
from agent_supervisor.gateway.resume.resumption import (
    Dialect,
    Resumption,
    StreamTap,
    plan_resumption,
)
from agent_supervisor.gateway.resume.sse import (
    StreamState,
    add_sent,
    as_dict,
    as_list,
    event_data,
    split_events,
)

__all__ = ["RESPONSES", "ResponsesDialect", "plan_stream"]

RESPONSES = "/v1/responses"


def plan_stream(path: str, body: dict[str, Any], raw: bytes) -> Resumption | None:
    """The plan for any streaming generation request (None: not resumable at all)."""
    if body.get("stream") is not True:
        return None
    if path == MESSAGES:
        return plan_messages(body, raw)
    if path == RESPONSES:
        return _plan_responses(body, raw)
    return plan_resumption(path, body, raw)


def _plan_responses(body: dict[str, Any], raw: bytes) -> Resumption:
    why = None
    fmt = body.get("text")
    if body.get("tools"):
        why = "it offers tools"
    elif body.get("reasoning"):
        why = "it asks for reasoning"
    elif isinstance(fmt, dict) and isinstance(fmt.get("format"), dict) and \
            fmt["format"].get("type") not in (None, "text"):
        why = "it asks for a structured output format"
    elif body.get("top_logprobs") or body.get("include"):
        why = "it asks for logprobs or extra output, which a continuation would not reproduce"
    elif body.get("previous_response_id"):
        why = "it continues a stored response, which the restarted engine no longer holds"
    elif body.get("background"):
        why = "it runs in the background"
    elif not isinstance(body.get("input"), (str, list)):
        why = "its input is neither text nor a list of items"
    plan = _ResponsesResumption(RESPONSES, body, raw, dialect=ResponsesDialect())
    if why is not None:
        plan.unsupported = f"not resumed: {why}"
    return plan


class _ResponsesResumption(Resumption):
    """A Responses stream continued natively, text-level (``Resumption.build`` counts
    the text sent with the engine's /tokenize and calls ``continuation``)."""

    def continuation(self, tap: StreamTap, tokens_sent: int | None = None) -> bytes:
        state = tap.state()
        if tokens_sent is not None:
            state.tokens = tap.counted = tokens_sent
        body = copy.deepcopy(self.body)
        items = body["input"] if isinstance(body["input"], list) else \
            [{"type": "message", "role": "user", "content": body["input"]}]
        last = items[-1] if items else None
        if isinstance(last, dict) and last.get("role") == "assistant" and \
                last.get("status") in ("in_progress", "incomplete") and \
                isinstance(last.get("content"), list) and last["content"] and \
                isinstance(last["content"][-1], dict) and \
                isinstance(last["content"][-1].get("text"), str):
            last["content"][-1]["text"] += state.text
        elif state.text:
            items.append({"type": "message", "role": "assistant", "status": "incomplete",
                          "id": state.extra.get("item_id") or "msg_resumed",
                          "content": [{"type": "output_text", "text": state.text,
                                       "annotations": []}]})
        body["input"] = items
        if isinstance(body.get("max_output_tokens"), int):
            body["max_output_tokens"] = max(1, body["max_output_tokens"] - state.tokens)
        self.continuation_path = RESPONSES
        return json.dumps(body).encode()


#: The continuation's opening events, dropped (the client has its own).
_RESPONSES_OPENING = frozenset({"response.created", "response.in_progress", "response.queued"})
_RESPONSES_DONE = (b'"type":"response.completed"', b'"type": "response.completed"',
                   b'"type":"response.incomplete"', b'"type": "response.incomplete"')


class ResponsesDialect(Dialect):
    """OpenAI's Responses stream (vLLM's entrypoints/openai/responses events)."""

    def __init__(self) -> None:
        self._base = StreamState()
        self._seq = 0

    def cut(self, out: bytes) -> int:
        if not any(k in out for k in (b"error", b"response.failed", b"response.completed")):
            return -1                            # every delta: no JSON parsed
        at = 0
        for event in split_events(out):
            ev = event_data(event) or {}
            kind = ev.get("type")
            status = (ev.get("response") or {}).get("status") \
                if isinstance(ev.get("response"), dict) else None
            if kind in ("error", "response.failed") or (
                    kind == "response.completed" and status == "cancelled"):
                return at
            at += len(event)
        return -1

    def finished(self, out: bytes) -> bool:
        return any(done in out for done in _RESPONSES_DONE)

    def state(self, sent: list[dict[str, Any]]) -> StreamState:
        s = StreamState()
        for ev in sent:
            kind = ev.get("type")
            if not isinstance(kind, str):
                continue
            if isinstance(ev.get("sequence_number"), int):
                s.extra["seq"] = ev["sequence_number"]
            if kind == "response.created" and isinstance(ev.get("response"), dict):
                s.id = ev["response"].get("id")
                s.created = ev["response"].get("created_at")
            elif kind == "response.output_item.added":
                item = as_dict(ev.get("item"))
                s.tool_call |= item.get("type") not in ("message", "reasoning")
                s.reasoning |= item.get("type") == "reasoning"
                if item.get("type") == "message":
                    s.extra.update(item_id=item.get("id"), output_index=ev.get("output_index"))
            elif kind == "response.content_part.added":
                s.extra["content_index"] = ev.get("content_index")
            elif kind == "response.output_text.delta" and isinstance(ev.get("delta"), str):
                s.text += ev["delta"]
                s.tokens += 1
            elif kind.startswith("response.reasoning"):
                s.reasoning = True
        return s

    def begin(self, base: StreamState) -> None:
        self._base = base
        self._seq = int(base.extra.get("seq", -1))

    def rewrite(self, tap: StreamTap, out: bytes) -> bytes:
        base, res = self._base, []
        item_id = base.extra.get("item_id")
        for event in split_events(out):
            ev = event_data(event)
            kind = None if ev is None else ev.get("type")
            if ev is None or not isinstance(kind, str):
                res.append(event)
                continue
            if kind in _RESPONSES_OPENING:
                continue
            if item_id is not None and kind in ("response.output_item.added",
                                                "response.content_part.added") and \
                    as_dict(ev.get("item")).get("type", "message") == "message":
                continue
            self._seq += 1
            ev["sequence_number"] = self._seq
            if item_id is not None and "item_id" in ev:
                ev["item_id"] = item_id
            if kind == "response.output_text.done" and isinstance(ev.get("text"), str):
                ev["text"] = base.text + ev["text"]
            if isinstance(ev.get("part"), dict) and isinstance(ev["part"].get("text"), str):
                ev["part"]["text"] = base.text + ev["part"]["text"]
            if isinstance(ev.get("item"), dict):
                self._prefix_item(ev["item"])
            if isinstance(ev.get("response"), dict):
                self._whole(ev["response"])
            res.append(f"event: {kind}\n".encode("utf-8", "replace") + b"data: " +
                       json.dumps(ev, separators=(",", ":")).encode() + b"\n\n")
        return b"".join(res)

    def _prefix_item(self, item: dict[str, Any]) -> None:
        base = self._base
        if item.get("type") != "message" or base.extra.get("item_id") is None:
            return
        item["id"] = base.extra["item_id"]
        content = item.get("content")
        if isinstance(content, list) and content and isinstance(content[0], dict) and \
                isinstance(content[0].get("text"), str):
            content[0]["text"] = base.text + content[0]["text"]

    def _whole(self, response: dict[str, Any]) -> None:
        """The final response: the first part's id, the whole text, usage summed."""
        base = self._base
        if base.id is not None:
            response["id"] = base.id
        if base.created is not None:
            response["created_at"] = base.created
        for item in as_list(response.get("output")):
            if isinstance(item, dict):
                self._prefix_item(item)
        add_sent(response.get("usage"), base.tokens, "output_tokens", "input_tokens")

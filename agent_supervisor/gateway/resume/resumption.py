"""Streams carried across an engine crash: the client sees one unbroken stream.

NVIDIA Dynamo calls this request migration (https://docs.nvidia.com/dynamo/dev/kubernetes/
fault-tolerance/request-migration, code in ai-dynamo/dynamo lib/llm/src/migration.rs): when
a worker dies mid-stream, the frontend sends the request again to a live worker with the
tokens generated so far appended to the prompt and the remaining token budget reduced by
them, and the client's stream goes on, "no tokens lost or duplicated", at most
``--migration-limit`` times per request (off by default there; "start with 3"). Here
the new worker is the same engine restarted by the supervisor, so the stream is held open
meanwhile with SSE comments (``: ...``, ignored by SSE decoders).

Which continuation each path gets:

- ``/v1/completions``, a string or token-id prompt: **token-level**, as Dynamo does. The
  gateway adds ``"return_token_ids": true`` to the request (vLLM 0.32.0,
  vllm/entrypoints/openai/completion/protocol.py: "In streaming mode, prompt_token_ids is
  included only in the first chunk, and token_ids contains the delta tokens for each
  chunk"), so the continuation's prompt is ``prompt_token_ids + token ids sent`` (vLLM's
  completions endpoint takes a prompt of token ids) and nothing is re-tokenized. The
  client's chunks then carry those two extra fields (unknown fields are ignored by the
  OpenAI SDK). Without ids in the chunks (an engine that ignores the field) the
  fallback is text-level: the text sent is appended to the prompt.
- ``/v1/chat/completions`` without tools, a response format or reasoning options:
  **token-level** too. ``return_token_ids`` gives the chat prompt's ids (the template
  applied) in the first chunk and each chunk's ids, so the continuation is a
  ``/v1/completions`` request of ``prompt_token_ids + ids sent`` with the chat request's
  sampling fields, its chunks rewritten into chat chunks. Measured on the CPU engine: the
  text-level way below diverged from the uninterrupted greedy stream right after the cut
  (the chat template re-renders the assistant text differently), this one did not.
- chat otherwise (or an engine that sends no ids): **text-level**. The text sent becomes a
  final assistant message
  continued with ``continue_final_message: true, add_generation_prompt: false`` (vLLM
  chat_completion/protocol.py), so the chat template renders it as the start of the
  answer. Exact where the tokenizer splits the text at the cut as the model emitted it
  (greedy decoding on the CPU engine: the same text, tests/integration). Tokens sent are
  counted by the new engine's ``/tokenize`` of the text sent (``add_special_tokens:
  false``), or one per content chunk if it cannot say (vLLM skips chunks whose text is
  still empty and, with speculative decoding, may put several tokens in one).
- ``/v1/messages`` (continued on /v1/completions from the token ids of the chat prompt
  and of the text sent) and ``/v1/responses`` (continued natively, text-level): see
  agent_supervisor/gateway/resume/apis.py and messages.py. Every other stream is not
  resumed; a cut ends it with an error event in the API's shape.

Not resumed, ended with a clear error event instead (a continuation would not be the
stream the client asked for): ``n > 1`` or ``best_of``, ``logprobs`` / ``top_logprobs``
(chat) or ``logprobs`` (completions), ``echo``, a batch of prompts, beam search, and a
chat stream cut inside a tool call (``delta.tool_calls`` seen: the tool parser has
consumed the model's raw text, which cannot be continued faithfully) or with reasoning
content (``reasoning_content``: the same). Usage is summed: completion tokens of all
parts; prompt tokens those of the last part less the tokens sent before it.
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from typing import Any

import httpx

from agent_supervisor.gateway.prompt import exact_tokens
from agent_supervisor.gateway.resume.sse import (
    MAX_EVENT_BYTES,
    MalformedStream,
    StreamState,
    add_sent,
    as_list,
    ends,
    events,
    events_end,
)

__all__ = ["Dialect", "Resumption", "StreamTap", "openai_cut", "plan_resumption"]

logger = logging.getLogger(__name__)

#: Chat request fields that mean the same on /v1/completions (vLLM's sampling parameters,
#: chat_completion/protocol.py and completion/protocol.py ``to_sampling_params``).
_SAMPLING = frozenset({
    "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos",
    "min_tokens", "skip_special_tokens", "spaces_between_special_tokens",
    "include_stop_str_in_output", "stream_options", "length_penalty", "logit_bias",
    "allowed_token_ids", "bad_words", "user", "priority", "truncate_prompt_tokens"})
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
_ERROR_EVENT = b'data: {"error"'
_ABORT = (b'"finish_reason":"abort"', b'"finish_reason": "abort"')
_DONE = b"data: [DONE]"
#: A recorded stream at most (bytes): past it the stream goes on unrecorded and is not
#: resumed (a 32k-token chat stream is about 8 MB as vLLM sends it).
MAX_RECORD_BYTES = 64 * 1024 * 1024


class Dialect:
    """How a stream of another API than OpenAI's is cut, read and continued
    (agent_supervisor/gateway/resume/apis.py, messages.py). ``out`` is always whole
    SSE events."""

    def hold(self, out: bytes, pending: bytes) -> tuple[bytes, bytes]:
        """Events to hold back until the next ones are seen (default: none)."""
        return out, pending

    def cut(self, out: bytes) -> int:
        """Where a cut starts in ``out`` (-1: none)."""
        raise NotImplementedError

    def finished(self, out: bytes) -> bool:
        """Whether ``out`` (as the client gets it) ends the stream."""
        raise NotImplementedError

    def state(self, sent: list[dict[str, Any]]) -> StreamState:
        """What the client has, from the JSON of every event sent."""
        raise NotImplementedError

    def begin(self, base: StreamState) -> None:
        """A continuation starts after ``base``."""
        raise NotImplementedError

    def rewrite(self, tap: StreamTap, out: bytes) -> bytes:
        """The continuation's events as the client's stream goes on."""
        raise NotImplementedError


@dataclass
class Resumption:
    """How one streaming request can be continued (``unsupported``: why it cannot)."""

    path: str
    body: dict[str, Any]
    upstream_raw: bytes
    token_level: bool = False
    unsupported: str | None = None
    used_tokens: bool = False
    """Whether the last continuation was token-level (the engine sent the ids)."""
    continuation_path: str = ""
    """Where the last continuation goes: chat token-level goes to /v1/completions."""
    dialect: Dialect | None = None
    """The client's API, where it is not OpenAI's (its stream's cuts and rewriting)."""
    continues_as_self: bool = True
    """Whether the continuation's stream comes in the client's API shape (False: an
    Anthropic messages stream continued on /v1/completions)."""

    async def build(self, tap: StreamTap, client: httpx.AsyncClient,
                    base_url: str) -> bytes | None:
        """The continuation's body for the engine at ``base_url`` (None: it cannot be
        built; the stream ends with an error event). Text-level continuations count
        the text sent with the engine's ``/tokenize``."""
        state = tap.state()
        counted = None
        if not (self.token_level and state.prompt_ids is not None and state.ids):
            counted = await exact_tokens(client, base_url, {
                "model": self.body.get("model"), "prompt": state.text,
                "add_special_tokens": False}) if state.text else 0
        return self.continuation(tap, counted)

    def refusal(self, tap: StreamTap, resumes: int, limit: int) -> str | None:
        """Why this cut stream is not resumed (None: resume it)."""
        if self.unsupported is not None:
            return self.unsupported
        if resumes >= limit:
            return f"it was already resumed {resumes} times (max_resumes_per_request)"
        state = tap.state()
        if state.tool_call:
            return "it was cut inside a tool call, which cannot be continued faithfully"
        if state.reasoning:
            return "it was cut in reasoning content, which cannot be continued faithfully"
        if state.choices > 1:
            return "it has more than one choice"
        return None

    def continuation(self, tap: StreamTap, tokens_sent: int | None = None) -> bytes:
        """The request that continues the stream from what the client has
        (``tokens_sent``: the engine's count of the text sent, if known)."""
        state = tap.state()
        if tokens_sent is not None and not (self.token_level and state.ids):
            state.tokens = tokens_sent
            tap.counted = tokens_sent
        body = copy.deepcopy(self.body)
        sent = state.tokens
        for key in ("max_tokens", "max_completion_tokens"):
            if isinstance(body.get(key), int):
                body[key] = max(1, body[key] - sent)
        self.used_tokens = self.token_level and state.prompt_ids is not None and \
            len(state.ids) == sent
        self.continuation_path = self.path
        if self.path == CHAT and self.used_tokens and state.prompt_ids is not None:
            self.continuation_path = COMPLETIONS
            cont = {k: v for k, v in body.items() if k in _SAMPLING}
            limit = body.get("max_completion_tokens", body.get("max_tokens"))
            if isinstance(limit, int):
                cont["max_tokens"] = limit
            cont.update(model=body.get("model"), stream=True, return_token_ids=True,
                        prompt=state.prompt_ids + state.ids)
            return json.dumps(cont).encode()
        if self.path == COMPLETIONS:
            if self.token_level and state.prompt_ids is not None and \
                    len(state.ids) == sent:
                body["prompt"] = state.prompt_ids + state.ids
            elif isinstance(body.get("prompt"), str):
                body["prompt"] = body["prompt"] + state.text
            if self.token_level:
                body["return_token_ids"] = True
        else:
            messages = list(body.get("messages") or [])
            last = messages[-1] if messages else None
            if body.get("continue_final_message") and isinstance(last, dict) and \
                    last.get("role") == "assistant" and isinstance(last.get("content"), str):
                messages[-1] = {**last, "content": last["content"] + state.text}
            elif state.text:
                messages.append({"role": "assistant", "content": state.text})
            if state.text or body.get("continue_final_message"):
                body["continue_final_message"] = True
                body["add_generation_prompt"] = False
            body["messages"] = messages
        return json.dumps(body).encode()


def plan_resumption(path: str, body: dict[str, Any], raw: bytes) -> Resumption | None:
    """The plan for a streaming chat or text completion (None: not a resumable kind of
    request at all, e.g. not streaming, another path)."""
    if path not in (CHAT, COMPLETIONS) or body.get("stream") is not True:
        return None
    why = None
    if (body.get("n") or 1) != 1 or (body.get("best_of") or 1) != 1:
        why = "it asks for more than one choice (n or best_of)"
    elif body.get("logprobs") or body.get("top_logprobs") or body.get("prompt_logprobs"):
        why = "it asks for logprobs, which a continuation would not reproduce"
    elif body.get("echo") or body.get("use_beam_search"):
        why = "echo and beam search cannot be continued"
    elif path == COMPLETIONS and not (isinstance(body.get("prompt"), str) or (
            isinstance(body.get("prompt"), list) and body["prompt"]
            and all(isinstance(t, int) for t in body["prompt"]))):
        why = "its prompt is a batch, which is not resumed"
    if why is not None:
        return Resumption(path, body, raw, unsupported=f"not resumed: {why}")
    # Chat token-level continues on /v1/completions, outside the chat parsers: only when
    # no tool, response format or reasoning parser could shape the rest of the answer.
    token_level = path == COMPLETIONS or not any(
        body.get(k) for k in ("tools", "functions", "response_format", "structured_outputs",
                              "guided_json", "guided_regex", "guided_choice", "guided_grammar",
                              "reasoning_effort", "chat_template_kwargs"))
    upstream = raw
    if token_level and "return_token_ids" not in body:
        end = raw.rstrip().rfind(b"}")
        upstream = raw[:end] + b',"return_token_ids":true}'
    return Resumption(path, body, upstream, token_level=token_level)


def openai_cut(out: bytes) -> int:
    """Where an OpenAI stream's cut starts in ``out`` (whole events), or -1: the engine's
    error event or an ``abort`` finish."""
    cut = out.find(_ERROR_EVENT)
    for abort in _ABORT:
        at = out.find(abort)
        if at >= 0:
            start = out.rfind(b"\n\n", 0, at)
            at = 0 if start < 0 else start + 2
            cut = at if cut < 0 else min(cut, at)
    return cut


class StreamTap:
    """Between the engine's stream and the client: passes whole SSE events on.

    With ``record`` (a resumable stream) it keeps what was sent, and holds back an engine
    error event (``data: {"error"...``, which vLLM sends when its engine dies mid-stream:
    chat_completion/serving.py ``create_streaming_error_response``) or an ``abort``
    finish, which mark a cut. Without it, chunks go on untouched. After a resumption
    (``continue_with``) the continuation's events are rewritten into the first part's
    (its id, no second role chunk, no second prompt ids, usage summed).
    """

    def __init__(self, *, record: bool, dialect: Dialect | None = None,
                 end: tuple[bytes, ...] | None = None) -> None:
        self.record = record
        self.end = end
        """What ends this stream when it is not recorded (agent_supervisor/gateway/resume/sse.py
        ``end_markers``; None: unknown, any end is its end)."""
        self.dialect = dialect
        """Another API's stream (Anthropic messages, Responses): its cuts, state and
        rewriting; None: OpenAI chat and text completions."""
        self.sent = bytearray()
        self.engine_error: bytes | None = None
        self.done = False
        self._pending = b""
        self._plan: Resumption | None = None
        self._base_tokens = 0
        self._base: StreamState | None = None
        self.counted: int | None = None
        """The engine's count of the text sent, when a continuation asked for it."""

    def feed(self, chunk: bytes) -> bytes:
        """The whole SSE events to pass on for ``chunk`` (maybe none: an event not yet
        whole). Raises MalformedStream when an event passes ``MAX_EVENT_BYTES``."""
        data = self._pending + chunk if self._pending else chunk
        end = events_end(data)
        if not end:
            if len(data) > MAX_EVENT_BYTES:
                raise MalformedStream(f"an event of the engine's stream is longer than "
                                      f"{MAX_EVENT_BYTES} bytes")
            self._pending = data
            return b""
        out, self._pending = data[:end], data[end:]
        if not self.record:
            self.done = self.done or (self.end is not None and ends(out, self.end))
            return out
        if len(self.sent) > MAX_RECORD_BYTES:     # too long to carry across a restart
            self.record, self.sent = False, bytearray()
        # A continuation of another API may come in OpenAI's shape (messages: a
        # /v1/completions stream): its cuts are found in the shape it comes in.
        reader = self.dialect if self._plan is None or self._plan.continues_as_self \
            else None
        if reader is not None:
            out, self._pending = reader.hold(out, self._pending)
        cut = openai_cut(out) if reader is None else reader.cut(out)
        if cut >= 0:
            self.engine_error = out[cut:]
            out = out[:cut]
        if self._plan is not None:
            out = self._rewrite(out) if self.dialect is None else \
                self.dialect.rewrite(self, out)
        if self.end is not None:
            self.done = self.done or ends(out, self.end)
        elif (_DONE in out) if self.dialect is None else self.dialect.finished(out):
            self.done = True
        self.sent += out
        return out

    def state(self) -> StreamState:
        """What the client has, parsed from everything sent."""
        if self.dialect is not None:
            s = self.dialect.state(events(bytes(self.sent)))
            if self.counted is not None:
                s.tokens = self.counted
            return s
        s = StreamState()
        for ev in events(bytes(self.sent)):
            s.id = s.id or ev.get("id")
            s.created = s.created or ev.get("created")
            if isinstance(ev.get("prompt_token_ids"), list) and s.prompt_ids is None:
                s.prompt_ids = ev["prompt_token_ids"]
            for ch in as_list(ev.get("choices")):
                if not isinstance(ch, dict):
                    continue
                index = ch.get("index", 0)
                if index != 0:
                    s.choices = max(s.choices, index + 1 if isinstance(index, int) else 2)
                    continue
                if s.prompt_ids is None and isinstance(ch.get("prompt_token_ids"), list):
                    s.prompt_ids = ch["prompt_token_ids"]
                piece = ch.get("text")
                delta = ch.get("delta") or {}
                if isinstance(delta, dict):
                    if delta.get("tool_calls"):
                        s.tool_call = True
                    if delta.get("reasoning_content") or delta.get("reasoning"):
                        s.reasoning = True
                    piece = delta.get("content") if piece is None else piece
                ids = ch.get("token_ids")
                if isinstance(ids, list):
                    s.ids += ids
                if isinstance(piece, str) and piece:
                    s.text += piece
                    if not isinstance(ids, list):
                        s.tokens += 1
        if s.ids:
            s.tokens = len(s.ids)
        elif self.counted is not None:
            s.tokens = self.counted
        return s

    def tokens_sent(self) -> int:
        """Tokens the client has (see the module docstring for how chat counts)."""
        return self.state().tokens

    def continue_with(self, plan: Resumption) -> None:
        """From now on the events come from a continuation of ``plan``."""
        self._base = self.state()
        self._base_tokens = self._base.tokens
        self._plan = plan
        self._pending = b""
        if self.dialect is not None:
            self.dialect.begin(self._base)
        self.engine_error = None
        self.done = False

    def _rewrite(self, data: bytes) -> bytes:
        base = self._base
        assert base is not None
        out = []
        for event in data.split(b"\n\n"):
            if not event:
                continue
            if not event.startswith(b"data: {"):
                out.append(event + b"\n\n")
                continue
            try:
                ev = json.loads(event[6:])
            except (ValueError, RecursionError):
                ev = None
            if not isinstance(ev, dict):
                out.append(event + b"\n\n")
                continue
            ev.pop("prompt_token_ids", None)
            if base.id is not None:
                ev["id"] = base.id
            if base.created is not None and "created" in ev:
                ev["created"] = base.created
            as_chat = self._plan is not None and self._plan.path == CHAT and \
                self._plan.continuation_path == COMPLETIONS
            if as_chat:
                ev["object"] = "chat.completion.chunk"
            keep = []
            for ch in as_list(ev.get("choices")):
                if isinstance(ch, dict) and as_chat:
                    text = ch.pop("text", "")
                    ch = {"index": ch.get("index", 0), "delta": {"content": text},
                          "logprobs": None, "finish_reason": ch.get("finish_reason"),
                          **({"stop_reason": ch["stop_reason"]} if "stop_reason" in ch
                             else {}), "token_ids": ch.get("token_ids")}
                if isinstance(ch, dict):
                    ch.pop("prompt_token_ids", None)
                    delta = ch.get("delta")
                    if isinstance(delta, dict) and "role" in delta:
                        delta.pop("role")
                        if not delta.get("content") and not ch.get("finish_reason"):
                            continue              # the continuation's opening chunk
                keep.append(ch)
            if ev.get("choices") and not keep:
                continue
            if "choices" in ev:
                ev["choices"] = keep
            add_sent(ev.get("usage"), self._base_tokens, "completion_tokens", "prompt_tokens")
            out.append(b"data: " + json.dumps(ev, separators=(",", ":")).encode() + b"\n\n")
        return b"".join(out)

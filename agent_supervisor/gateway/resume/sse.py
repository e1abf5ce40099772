"""Server-sent events as the gateway reads them: whole events, their JSON, and what the
client has been sent (``StreamState``). How a stream of each API is cut and continued
(``Dialect``) lives beside the resumption, in this folder: resumption.py, messages.py,
apis.py.

SSE (WHATWG HTML, "Server-sent events"): events end with a blank line; ``data:`` lines
carry the payload (JSON here), ``event:`` names it (Anthropic's and the Responses API's
streams), lines starting with ``:`` are comments.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_EVENT_BYTES", "MalformedStream", "StreamState", "add_sent",
           "as_dict", "as_list", "end_markers", "ends", "event_data", "events", "events_end",
           "split_events", "sse_event"]

#: One SSE event at most (bytes): vLLM's largest is the Responses API's
#: ``response.completed``, which repeats the whole answer (a 32k-token answer is about
#: 200 KB of JSON). An engine stream with no event end past this is malformed.
MAX_EVENT_BYTES = 8 * 1024 * 1024
#: How each generation path's stream ends (vLLM: ``data: [DONE]`` after the last chunk;
#: anthropic/serving.py ``message_stop``; the Responses API's last event). A stream of
#: these paths that ends without one was cut short.
_ENDS: dict[str, tuple[bytes, ...]] = {
    "/v1/chat/completions": (b"data: [DONE]",),
    "/v1/completions": (b"data: [DONE]",),
    "/v1/messages": (b"message_stop",),
    "/v1/responses": (b"response.completed", b"response.incomplete", b"response.failed"),
}


#: The ``type`` of the JSON of a last event (Anthropic's, the Responses API's).
_END_TYPES = frozenset({"message_stop", "response.completed", "response.incomplete",
                        "response.failed"})


def ends(out: bytes, markers: tuple[bytes, ...]) -> bool:
    """Whether ``out`` (whole events) holds a well-formed last event: a ``data: [DONE]``
    line, or a ``data:`` JSON whose ``type`` ends a stream, in an event holding one of
    ``markers`` (only those events are parsed: one per stream)."""
    if not any(m in out for m in markers):
        return False
    for event in out.replace(b"\r\n", b"\n").split(b"\n\n"):
        if not any(m in event for m in markers):
            continue
        for line in event.split(b"\n"):
            if line.rstrip() == b"data: [DONE]":
                return True
            if line.startswith(b"data:"):
                try:
                    obj = json.loads(line[5:])
                except (ValueError, RecursionError):
                    continue
                if isinstance(obj, dict) and isinstance(obj.get("type"), str) \
                        and obj["type"] in _END_TYPES:
                    return True
    return False


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (an engine may send anything
    where an object belongs)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` if it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


class MalformedStream(ValueError):
    """An engine stream the gateway cannot pass on as SSE events."""


def end_markers(path: str | None) -> tuple[bytes, ...] | None:
    """What ends a stream of ``path`` (None: a path whose end the gateway cannot tell)."""
    return _ENDS.get(path or "")


def events_end(data: bytes) -> int:
    """Where the last whole SSE event of ``data`` ends (after its blank line, LF or
    CRLF); 0 when ``data`` holds no whole event."""
    lf, crlf = data.rfind(b"\n\n"), data.rfind(b"\r\n\r\n")
    return max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)


@dataclass
class StreamState:
    """What the client has been sent, parsed from the SSE events (at a cut only)."""

    text: str = ""
    tokens: int = 0
    ids: list[int] = field(default_factory=list)
    prompt_ids: list[int] | None = None
    tool_call: bool = False
    reasoning: bool = False
    choices: int = 1
    id: str | None = None
    created: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """What another API's stream needs (agent_supervisor/gateway/resume/apis.py)."""


def events(data: bytes) -> list[dict[str, Any]]:
    out = []
    for event in data.split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data: {") or line.startswith(b"data:{"):
                try:
                    obj = json.loads(line[5:])
                except (ValueError, RecursionError):
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
    return out


def add_sent(usage: Any, sent: int, output: str, prompt: str) -> None:
    """A continuation's ``usage`` as the whole stream's: the ``sent`` tokens move from
    its prompt count (``prompt`` key) to its output count (``output`` key)."""
    if isinstance(usage, dict) and isinstance(usage.get(output), int):
        usage[output] += sent
        if isinstance(usage.get(prompt), int):
            usage[prompt] = max(0, usage[prompt] - sent)
            usage["total_tokens"] = usage[prompt] + usage[output]


def split_events(out: bytes) -> list[bytes]:
    """Whole events of ``out``, each with its blank line."""
    return [e + b"\n\n" for e in out.split(b"\n\n") if e]


def event_data(event: bytes) -> dict[str, Any] | None:
    """The JSON object of one event's ``data:`` line (None: none, or not JSON)."""
    found = events(event)
    return found[0] if found else None


def sse_event(kind: str, data: dict[str, Any]) -> bytes:
    """One named event: ``event: kind`` and its compact JSON ``data:``."""
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()

"""Server-sent events as the gateway reads them: whole events, their JSON, and what a
resumable stream needs to know about its API (``Dialect``; agent_supervisor/gateway/resume.py,
resume_messages.py, resume_apis.py).

SSE (WHATWG HTML, "Server-sent events"): events end with a blank line; ``data:`` lines
carry the payload (JSON here), ``event:`` names it (Anthropic's and the Responses API's
streams), lines starting with ``:`` are comments.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_supervisor.gateway.resume import StreamTap

__all__ = ["Dialect", "StreamState", "add_sent", "event_data", "events", "split_events",
           "sse_event"]


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
    """What another API's stream needs (agent_supervisor/gateway/resume_apis.py)."""


def events(data: bytes) -> list[dict[str, Any]]:
    out = []
    for event in data.split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data: {") or line.startswith(b"data:{"):
                try:
                    obj = json.loads(line[5:])
                except ValueError:
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


class Dialect:
    """How a stream of another API than OpenAI's is cut, read and continued
    (agent_supervisor/gateway/resume_apis.py). ``out`` is always whole SSE events."""

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

"""A generation request's JSON body, read once and checked just enough that the gateway's
own code (prompt estimate, resumption) cannot fail on it.

The engine validates the rest (vLLM's pydantic request models answer 400 with the field).
What the gateway refuses itself, with a 400 in the caller's API shape: a body that is not
UTF-8 (RFC 8259 section 8.1: JSON exchanged between systems is UTF-8), not JSON, nested
deeper than Python's parser goes (``RecursionError``: issue 17 measured a 500 for 100k
levels), not an object, or with ``messages`` not a list of objects, ``prompt`` not a
string or list, ``stream`` not a boolean.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["BadBody", "parse_body"]


class BadBody(ValueError):
    """The body cannot be a request; ``param`` names the field (or None)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request object in ``raw``. Raises BadBody (never anything else)."""
    if not raw:
        raise BadBody("the request body is empty: a JSON object was expected")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadBody(f"the request body is not UTF-8 (byte {exc.start})") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadBody(f"the request body is not JSON: {exc.msg} at line {exc.lineno} "
                      f"column {exc.colno}") from None
    except RecursionError:
        raise BadBody("the request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise BadBody(f"the request body must be a JSON object, got {type(body).__name__}")
    messages = body.get("messages")
    if messages is not None and not (isinstance(messages, list)
                                     and all(isinstance(m, dict) for m in messages)):
        raise BadBody("messages must be a list of message objects", "messages")
    prompt = body.get("prompt")
    if prompt is not None and not isinstance(prompt, str | list):
        raise BadBody("prompt must be a string or a list", "prompt")
    if "stream" in body and not isinstance(body["stream"], bool | None):
        raise BadBody("stream must be true or false", "stream")
    return body

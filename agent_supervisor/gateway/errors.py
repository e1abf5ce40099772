"""The gateway's own errors, in the caller's API shape.

OpenAI: ``{"error": {"message", "type", "param", "code"}}`` (the OpenAI API reference,
"Error codes"; vLLM's ``ErrorResponse`` is the same shape) plus ``"src": "supervisor"``
so an agent's log says who refused. Anthropic (``/v1/messages``): ``{"type": "error",
"error": {"type", "message"}}`` with Anthropic's error types (docs.anthropic.com, API
"Errors": invalid_request_error 400, authentication_error 401, not_found_error 404,
request_too_large 413, rate_limit_error 429, api_error 500, overloaded_error 529), again
with ``"src": "supervisor"``. Inside an SSE stream the same objects travel as a
``data:`` event (OpenAI, then ``data: [DONE]``) or an ``event: error`` (Anthropic); the
Responses API's stream has its own error event (OpenAI API reference, "Streaming events":
``event: error`` with ``{"type": "error", "code", "message", "param",
"sequence_number"}``).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse, Response

from agent_supervisor.gateway.paths import Api

__all__ = ["api_error", "error_body", "openai_error", "sse_error"]

_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 405: "invalid_request_error",
                    413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                    502: "api_error", 503: "overloaded_error"}


def error_body(api: Api, status: int, message: str, *, type_: str, code: str,
               param: str | None = None) -> dict[str, Any]:
    """The error object of ``api`` (``type_``/``code`` are OpenAI's; Anthropic's type is
    derived from ``status``)."""
    if api is Api.ANTHROPIC:
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"),
                                           "message": message}, "src": "supervisor"}
    return {"error": {"message": message, "type": type_, "param": param, "code": code},
            "src": "supervisor"}


def api_error(api: Api, status: int, message: str, *, type_: str, code: str,
              param: str | None = None, headers: dict[str, str] | None = None) -> Response:
    """An error response in ``api``'s shape, marked as the supervisor's own."""
    return JSONResponse(error_body(api, status, message, type_=type_, code=code, param=param),
                        status_code=status, headers=headers)


def openai_error(status: int, message: str, *, type_: str, code: str,
                 param: str | None = None, headers: dict[str, str] | None = None) -> Response:
    """An error in the OpenAI API's shape, marked as the supervisor's own."""
    return api_error(Api.OPENAI, status, message, type_=type_, code=code, param=param,
                     headers=headers)


def sse_error(api: Api, message: str, *, code: str, done: bool = True,
              sequence_number: int | None = None) -> bytes:
    """The error as the last event(s) of an SSE stream (``sequence_number``: the
    Responses API's next one, when known)."""
    if api is Api.RESPONSES:
        event: dict[str, Any] = {"type": "error", "code": code, "message": message, "param": None}
        if sequence_number is not None:
            event["sequence_number"] = sequence_number
        return f"event: error\ndata: {json.dumps({**event, 'src': 'supervisor'})}\n\n".encode()
    body = error_body(api, 500, message, type_="server_error", code=code)
    if api is Api.ANTHROPIC:
        return f"event: error\ndata: {json.dumps(body)}\n\n".encode()
    tail = "data: [DONE]\n\n" if done else ""
    return f"data: {json.dumps(body)}\n\n{tail}".encode()

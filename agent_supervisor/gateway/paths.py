"""Which paths the gateway forwards: an allow-list, matched on the raw path.

Routes as vLLM 0.32.0 registers them (``@router.post``/``@router.get`` under
vllm/entrypoints/: openai/, anthropic/api_router.py, pooling/, speech_to_text/,
serve/tokenize/). Everything else gets a 404 from the gateway itself; the engine's admin
routes (serve/dev/, serve/lora/, serve/elastic_ep/, serve/sleep ...) can never be
reached, even through ``gateway.extra_paths``: with ``VLLM_SERVER_DEV_MODE=1`` they put
the engine to sleep, run RPCs in its workers or load adapters (issue 17).

Matching is on the path exactly as the client sent it (ASGI ``raw_path``), so
``/v1/./chat/completions``, ``//v1/chat/completions`` or ``/v1%2Fchat/completions``
cannot reach a route under a name the limits do not know: those forms get a 400.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

__all__ = ["ADMITTED", "ANTHROPIC", "DENIED", "JSON_BODIES", "PASS_THROUGH", "RESPONSES", "Api",
           "Route", "Routes", "not_normal"]


class Api(StrEnum):
    """The API a path belongs to: errors go back in its shape (the Responses API's
    errors are OpenAI's, but inside a stream its error event is its own)."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    RESPONSES = "responses"


#: Generation paths: admitted (a slot, the mode's limits), held during a switch, drained.
ADMITTED = frozenset({
    "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
    "/v1/embeddings", "/pooling", "/v1/rerank", "/rerank", "/v2/rerank", "/score",
    "/v1/score", "/classify", "/v1/audio/transcriptions", "/v1/audio/translations",
})
#: Cheap reads passed straight through (no slot).
PASS_THROUGH = frozenset({
    "/v1/models", "/tokenize", "/detokenize", "/health", "/version",
    "/v1/messages/count_tokens",
})
#: Admitted paths whose body is JSON (the audio ones are multipart forms).
JSON_BODIES = ADMITTED - {"/v1/audio/transcriptions", "/v1/audio/translations"}
#: Paths answered in Anthropic's shape.
ANTHROPIC = frozenset({"/v1/messages", "/v1/messages/count_tokens"})
#: The Responses API's path (its stream's error event has its own shape).
RESPONSES = "/v1/responses"
#: Engine admin routes (and their prefixes): never forwarded, whatever the policy says.
DENIED = (
    "/sleep", "/wake_up", "/is_sleeping", "/reset_prefix_cache", "/reset_mm_cache",
    "/reset_encoder_cache", "/collective_rpc", "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter", "/scale_elastic_ep", "/is_scaling_elastic_ep",
    "/server_info", "/pause", "/resume", "/is_paused", "/update_weights",
    "/update_weight_version", "/start_weight_update", "/finish_weight_update",
    "/start_draft_weight_update", "/init_weight_transfer_engine",
    "/shutdown_weight_transfer_engine", "/weight_info", "/weight_checker",
    "/get_world_size", "/release_kv_cache_memory", "/start_profile", "/stop_profile",
    "/abort_requests", "/inference/v1/abort_requests", "/fault_tolerance",
    "/kv_event_sources", "/load", "/metrics",
)


class Route(StrEnum):
    """What the gateway does with a path."""

    ADMIT = "admit"
    PASS = "pass"


def _denied(path: str) -> bool:
    return any(path == d or path.startswith(d + "/") for d in DENIED)


def not_normal(raw_path: bytes) -> str | None:
    """Why ``raw_path`` is not in normal form (percent-encoding, ``//``, ``.`` or ``..``
    segments, a backslash), or None if it is."""
    if b"%" in raw_path:
        return "percent-encoded characters"
    if b"\\" in raw_path:
        return "a backslash"
    if b"//" in raw_path:
        return "an empty segment (//)"
    segments = raw_path.split(b"/")
    if b"." in segments or b".." in segments:
        return "a dot segment (. or ..)"
    return None


class Routes:
    """The allow-list of one policy: the built-in paths plus ``extra_paths`` (passed
    through, never admin paths). ``route(raw_path)`` is one dict lookup."""

    def __init__(self, extra_paths: Iterable[str] = ()) -> None:
        table: dict[bytes, tuple[Route, Api]] = {}
        for path in PASS_THROUGH:
            table[path.encode()] = (Route.PASS, Api.ANTHROPIC if path in ANTHROPIC
                                    else Api.OPENAI)
        self.ignored = sorted(p for p in extra_paths if _denied(p) or not_normal(p.encode()))
        for path in extra_paths:
            if path not in self.ignored:
                table[path.encode()] = (Route.PASS, Api.OPENAI)
        for path in ADMITTED:
            table[path.encode()] = (Route.ADMIT, Api.ANTHROPIC if path in ANTHROPIC
                                    else Api.RESPONSES if path == RESPONSES else Api.OPENAI)
        self._table = table

    def route(self, raw_path: bytes) -> tuple[Route, Api] | None:
        """The route and API of ``raw_path``, or None when it is not forwarded."""
        return self._table.get(raw_path)

    @staticmethod
    def api_of(raw_path: bytes) -> Api:
        """The API shape for an error about a path that is not forwarded."""
        return Api.ANTHROPIC if raw_path.startswith(b"/v1/messages") else Api.OPENAI

"""How long is a prompt? A cheap estimate first, the engine's ``/tokenize`` when it matters.

The estimate (UTF-8 bytes / 4, a common rule for BPE tokenizers on English and code) runs
on every request and costs little: it counts every string and object key under the
fields that reach the model: ``messages`` (chat), ``prompt`` (completions), ``input``
(Responses API, embeddings), ``system`` (Anthropic), ``instructions`` (Responses API),
``tools`` and ``tool_choice`` (their JSON schemas are rendered into the prompt by the
chat template), and the pooling/scoring inputs (``query``, ``documents``, ``text_1``,
``text_2``, ``queries``, ``items``, ``data``), and every integer under them as one token:
a prompt sent as token ids (``"prompt": [1, 2, 3]`` on /v1/completions, a list of such
lists for a batch, ``input`` ids for embeddings) is that many tokens (issue 34: such a
prompt counted 0 and passed ``max_prompt_tokens``; ``exact_tokens`` counts the ids
themselves). Only when a mode sets ``max_prompt_tokens`` and the estimate comes within
a factor of 2 of it does the gateway ask the engine's ``/tokenize``
(vllm/entrypoints/serve/tokenize/protocol.py: ``{"model", "messages", "tools"}`` or
``{"model", "prompt"}`` in, ``{"count", "max_model_len", "tokens"}`` out) for the exact
count, so the 400 it returns names a real number. Otherwise the engine decides (vLLM
itself rejects a prompt longer than ``--max-model-len``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

__all__ = ["BYTES_PER_TOKEN", "PROMPT_FIELDS", "estimate_tokens", "exact_tokens", "token_ids",
           "tokenize_ids"]

BYTES_PER_TOKEN = 4
#: Request fields whose text reaches the model.
PROMPT_FIELDS = ("messages", "prompt", "input", "system", "instructions", "tools",
                 "tool_choice", "query", "documents", "text_1", "text_2", "queries",
                 "items", "data")


def _text_bytes(value: Any) -> int:
    """UTF-8 bytes of every string and key under ``value``, and ``BYTES_PER_TOKEN`` for
    every integer (a token id; iterative: any depth)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool):
            total += BYTES_PER_TOKEN
        elif isinstance(item, str):
            total += len(item) if item.isascii() else len(item.encode("utf-8", "replace"))
        elif isinstance(item, dict):
            for key, sub in item.items():
                if isinstance(key, str) and key not in ("role", "type"):
                    total += len(key)
                stack.append(sub)
        elif isinstance(item, list):
            stack.extend(item)
    return total


def estimate_tokens(body: dict[str, Any]) -> int:
    """Estimated prompt tokens of a generation request body (never raises)."""
    total = 0
    for field in PROMPT_FIELDS:
        value = body.get(field)
        if value is not None:
            total += _text_bytes(value)
    return total // BYTES_PER_TOKEN + 1


def token_ids(prompt: Any) -> int | None:
    """How many token ids ``prompt`` holds when it is a list of them or a batch of such
    lists (the tokens are the ids: nothing to ask the engine); None for any other prompt."""
    if not isinstance(prompt, list) or not prompt:
        return None
    batch = prompt if all(isinstance(p, list) for p in prompt) else [prompt]
    if not all(isinstance(t, int) and not isinstance(t, bool) for p in batch for t in p):
        return None
    return sum(len(p) for p in batch)


async def exact_tokens(client: httpx.AsyncClient, base_url: str, body: dict[str, Any],
                       timeout_seconds: float = 5.0) -> int | None:
    """The engine's own count of the prompt (chat template included), or None if the
    engine cannot say (not ready, no /tokenize, an error, a field it cannot count)."""
    ids = token_ids(body.get("prompt"))
    if ids is not None:
        return ids
    req: dict[str, Any] = {"model": body.get("model")}
    if isinstance(body.get("messages"), list) and "system" not in body:
        req["messages"] = body["messages"]
        tools = body.get("tools")
        if isinstance(tools, list) and all(isinstance(t, dict) and "function" in t
                                           for t in tools):
            req["tools"] = tools          # OpenAI's shape; Anthropic's has input_schema
    elif isinstance(body.get("prompt"), str):
        req["prompt"] = body["prompt"]
        if "add_special_tokens" in body:
            req["add_special_tokens"] = body["add_special_tokens"]
    else:
        return None
    try:
        resp = await client.post(f"{base_url}/tokenize", json=req, timeout=timeout_seconds)
        return int(resp.json()["count"]) if resp.status_code == 200 else None
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


async def tokenize_ids(client: httpx.AsyncClient, base_url: str, req: dict[str, Any],
                       timeout_seconds: float = 5.0) -> list[int] | None:
    """The engine's token ids for a ``/tokenize`` request (``{"model", "prompt",
    "add_special_tokens"}`` or ``{"model", "messages", "add_generation_prompt"}``,
    vllm/entrypoints/serve/tokenize/protocol.py), or None if it cannot say."""
    try:
        resp = await client.post(f"{base_url}/tokenize", json=req, timeout=timeout_seconds)
        tokens = resp.json()["tokens"] if resp.status_code == 200 else None
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        return None
    return tokens

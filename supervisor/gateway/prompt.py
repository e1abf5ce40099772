"""How long is a prompt? A cheap estimate first, the engine's ``/tokenize`` when it matters.

The estimate (UTF-8 bytes / 4, a common rule for BPE tokenizers on English and code) runs
on every request and costs nothing. Only when a mode sets ``max_prompt_tokens`` and the
estimate comes within a factor of 2 of it does the gateway ask the engine's
``/tokenize`` (vllm/entrypoints/serve/tokenize: ``{"model", "messages"}`` or
``{"model", "prompt"}`` in, ``{"count", "max_model_len", "tokens"}`` out) for the exact
count, so the 400 it returns names a real number. Otherwise the engine decides (vLLM
itself rejects a prompt longer than ``--max-model-len``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

__all__ = ["BYTES_PER_TOKEN", "estimate_tokens", "exact_tokens"]

BYTES_PER_TOKEN = 4


def _text(body: dict[str, Any]) -> str:
    if "messages" in body:
        parts = []
        for m in body.get("messages") or ():
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [c.get("text", "") for c in content if isinstance(c, dict)]
        return "\n".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    return prompt if isinstance(prompt, str) else ""


def estimate_tokens(body: dict[str, Any]) -> int:
    """Estimated prompt tokens of a chat or completion request body (never raises)."""
    return len(_text(body).encode("utf-8", errors="replace")) // BYTES_PER_TOKEN + 1


async def exact_tokens(client: httpx.AsyncClient, base_url: str, body: dict[str, Any],
                       timeout_seconds: float = 5.0) -> int | None:
    """The engine's own count of the prompt (chat template included), or None if the
    engine cannot say (not ready, no /tokenize, an error)."""
    req: dict[str, Any] = {"model": body.get("model")}
    if "messages" in body:
        req["messages"] = body["messages"]
    elif isinstance(body.get("prompt"), str):
        req["prompt"] = body["prompt"]
    else:
        return None
    try:
        resp = await client.post(f"{base_url}/tokenize", json=req, timeout=timeout_seconds)
        return int(resp.json()["count"]) if resp.status_code == 200 else None
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None

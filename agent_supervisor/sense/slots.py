"""llama-server's ``GET /slots`` read for what it says (issue 29): how many slots there
are and how many are processing a task.

The answer is a JSON list, one object per slot (``--parallel N``), each with ``id``,
``n_ctx``, ``speculative``, ``is_processing`` and, once a slot has had a task, ``id_task``,
``params`` and ``next_token`` (tools/server/server-context.cpp ``server_slot::to_json``;
``is_processing`` replaced ``state`` in ggml-org/llama.cpp PR #10162; recorded from the
real binary in tests/fixtures/llamacpp/0.3.36/slots.json). ``/slots`` is answered by the
server's own loop, so an answer also proves the loop runs (llama.cpp #27388). Pure.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["slot_fields"]


def slot_fields(text: str | None) -> dict[str, Any]:
    """``engine_slots_total`` and ``engine_slots_processing`` from a ``/slots`` answer;
    {} when it is absent or not the documented shape (unknown, never 0). Never raises."""
    if not text:
        return {}
    try:
        slots = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(slots, list) or not slots or not all(
            isinstance(s, dict) and isinstance(s.get("is_processing"), bool) for s in slots):
        return {}
    return {"engine_slots_total": len(slots),
            "engine_slots_processing": sum(1 for s in slots if s["is_processing"])}

"""The Sample fields each engine's ``/metrics`` fills on every build the supervisor runs.

The engine profiles (``agent_supervisor.sense.profiles``) read each engine's names into these
fields; this table says which of them an engine exports at all, so that the
``telemetry_health`` guard expects only those (issue 29: every llama-server run carried a
standing ``telemetry_degraded`` warning for series llama-server never exports). It sits on
the ground floor because both the profiles (``sense/``) and the guard (``decide/``, which
never imports ``sense/``) read it; ``tests/unit/test_engine_profiles.py`` checks it against
the profiles' metric tables and the recorded scrapes. Pure data.

Sources:
- vLLM: every field below has a series in vllm/v1/metrics/loggers.py (``vllm:num_requests_*``,
  ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:iteration_tokens_total``, ``vllm:num_preemptions_total``,
  ``vllm:kv_cache_usage_perc``, ``vllm:spec_decode_*``); a build without one of them is what
  the guard reports.
- llama-server: tools/server/server-task.cpp ``to_metrics`` (recorded in
  tests/fixtures/llamacpp/0.3.36/metrics.txt); no preemption counter, and no KV-cache
  series since llama.cpp #13660 (#22879: "Removed metrics: llamacpp:kv_cache_usage_ratio";
  defilantech/LLMKube#1373 lists the eleven ``llamacpp:`` series of a live server).
"""

from __future__ import annotations

__all__ = ["ENGINE_SERIES", "exported_series"]

_LOAD_AND_PROGRESS = frozenset({
    "requests_running", "requests_waiting", "prompt_tokens_total", "generation_tokens_total",
    "iteration_tokens_count_total"})
_SPECULATION = frozenset({
    "spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total", "spec_decode_accepted_per_position_total"})

#: Engine kind (``engine.kind``) -> the Sample fields its ``/metrics`` fills on every build.
ENGINE_SERIES: dict[str, frozenset[str]] = {
    "vllm": _LOAD_AND_PROGRESS | _SPECULATION | {"preemptions_total", "kv_cache_usage_ratio"},
    "llama_cpp": _LOAD_AND_PROGRESS | _SPECULATION,
}


def exported_series(kind: str) -> frozenset[str] | None:
    """The fields engine ``kind`` exports; None for a kind not in the table (expect all)."""
    return ENGINE_SERIES.get(kind)

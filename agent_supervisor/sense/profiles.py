"""Engine profiles: what differs between the engines the supervisor can run.

A profile is picked by the policy's ``engine.kind`` (``profile_for``) and holds, for one
engine: its flag rules (``agent_supervisor.policy.engine_flags``: the argument vector's tail, how
speculation shows in the flags, the sequences cap, the API key variable, whether SIGTERM
drains), its metric names and their aliases (mapped onto the same profile-neutral
``Sample`` fields), its readiness probe, the probe only its own scheduling loop answers,
its process roles, and the log-signature tags its lines can carry
(``agent_supervisor.sense.engine_log``). Guards read the Sample fields only; nothing in
``decide/`` knows which engine runs.

llama-server facts (llama.cpp vendored by llama-cpp-python 0.3.36, recorded from the real
binary in tests/fixtures/llamacpp/0.3.36/):
- ``/health`` answers 503 ``{"error": {"message": "Loading model"}}`` until the model is
  loaded, then 200 ``{"status": "ok"}`` from the HTTP thread, without the task queue
  (tools/server/server-context.cpp ``get_health``): a wedged loop still answers it.
- ``/metrics`` (only with ``--metrics``) and ``/slots`` are tasks of the server's main
  loop (``post_task``; ``/slots`` high-priority): when the loop stops, both stop answering
  (llama.cpp #27388: "/health OK but /slots hangs").
- One process (HTTP threads, the main loop, compute threads); no children.
- No preemption counter and, in this build, no KV-cache usage gauge (older builds had
  ``llamacpp:kv_cache_usage_ratio``, kept as an alias): those fields stay unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_supervisor.policy.engine_flags import FlagRules, flag_rules
from agent_supervisor.sense.names import (
    HEALTH_PATH,
    METRICS,
    PROCESS_TITLES,
    SPEC_ACCEPTED_PER_POSITION,
    Aggregate,
)
from agent_supervisor.telemetry.engine_series import ENGINE_SERIES

__all__ = ["LLAMA_CPP_METRICS", "EngineProfile", "profile_for"]

#: Sample field -> (llama-server sample names newest first, aggregation); names as
#: tools/server/server-task.cpp ``to_metrics`` writes them (prefix ``llamacpp:``).
LLAMA_CPP_METRICS: dict[str, tuple[tuple[str, ...], Aggregate]] = {
    "requests_running": (("llamacpp:requests_processing",), "sum"),
    "requests_waiting": (("llamacpp:requests_deferred",), "sum"),
    "kv_cache_usage_ratio": (("llamacpp:kv_cache_usage_ratio",), "max"),
    "prompt_tokens_total": (("llamacpp:prompt_tokens_total",), "sum"),
    "generation_tokens_total": (("llamacpp:tokens_predicted_total",), "sum"),
    # llama_decode() calls of the target ("excluding speculative decoding"): the heartbeat.
    "iteration_tokens_count_total": (("llamacpp:n_decode_total",), "sum"),
    "spec_decode_num_drafts_total": (("llamacpp:spec_decode_num_drafts_total",), "sum"),
    "spec_decode_num_draft_tokens_total": (("llamacpp:spec_decode_num_draft_tokens_total",),
                                           "sum"),
    "spec_decode_num_accepted_tokens_total": (
        ("llamacpp:spec_decode_num_accepted_tokens_total",), "sum"),
}


@dataclass(frozen=True)
class EngineProfile:
    """One engine's differences (see the module doc)."""

    kind: str
    flags: FlagRules
    metrics: dict[str, tuple[tuple[str, ...], Aggregate]]
    """Sample field -> (aliases newest first, aggregation across label sets)."""
    per_position_metric: str | None
    """Accepted draft tokens by ``position`` label, if the engine has the series."""
    health_path: str = HEALTH_PATH
    """Readiness: 200 once the model is loaded."""
    loop_probe_path: str | None = None
    """A GET that only the engine's own scheduling loop answers (llama-server ``/slots``):
    no answer within the probe timeout is evidence of a stalled loop."""
    process_titles: dict[str, str] = field(default_factory=dict)
    """Role -> process-title prefix of the engine's child processes (none: one process)."""
    log_tags: tuple[str, ...] = ()
    """The ``engine_log`` tags this engine's own lines carry (the table is shared: no
    engine's pattern matches another's lines; tests/unit/test_engine_profiles.py)."""
    series: frozenset[str] = frozenset()
    """The Sample fields this engine's ``/metrics`` fills on every build
    (``agent_supervisor.telemetry.engine_series``): what ``telemetry_health`` expects."""


_PROFILES = {
    "vllm": EngineProfile(
        "vllm", flag_rules("vllm"), METRICS, SPEC_ACCEPTED_PER_POSITION,
        process_titles=dict(PROCESS_TITLES),
        log_tags=("cuda_illegal_memory_access", "device_side_assert", "engine_dead",
                  "worker_died", "rpc_timeout", "structured_output_fsm", "out_of_memory",
                  "insufficient_memory_at_startup", "bad_argument", "model_not_found",
                  "container_refused", "model_files_corrupt", "checkpoint_incompatible",
                  "driver_mismatch", "compile_cache_corrupt", "nccl_fabric"),
        series=ENGINE_SERIES["vllm"]),
    "llama_cpp": EngineProfile(
        "llama_cpp", flag_rules("llama_cpp"), LLAMA_CPP_METRICS,
        "llamacpp:spec_decode_num_accepted_tokens_per_pos_total", loop_probe_path="/slots",
        log_tags=("ggml_assert", "out_of_memory",
                  "bad_argument", "model_not_found", "container_refused"),
        series=ENGINE_SERIES["llama_cpp"]),
}


def profile_for(kind: str) -> EngineProfile:
    """The profile of ``engine.kind``. Raises KeyError for an unknown kind."""
    return _PROFILES[kind]

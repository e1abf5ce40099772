"""Every name the supervisor reads from vLLM, quoted verbatim in one place.

vLLM renames metrics between versions; each concept maps to a tuple of sample names,
newest first, and the first one present in a scrape wins. A concept with no present
name is unknown (None), never 0.

Names are *sample* names as exposed (counters keep ``_total``; prometheus_client's
parser strips ``_total`` from family names, so matching is on samples). Sources:
vllm/v1/metrics/loggers.py (vllm 0.32.0, checked against a real scrape in
tests/fixtures/vllm/0.32.0/), and docs.vllm.ai "Production Metrics" for the renames
(``vllm:gpu_cache_usage_perc`` -> ``vllm:kv_cache_usage_perc``, deprecated in v0.10/0.11;
``vllm:num_preemptions`` became a ``_total`` counter).
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "COMPLETIONS_PATH",
    "HEALTH_PATH",
    "LABEL_SELECT",
    "METRICS",
    "METRICS_PATH",
    "MODELS_PATH",
    "POSITION_LABEL",
    "PROCESS_TITLES",
    "SPEC_ACCEPTED_PER_POSITION",
    "Aggregate",
]

HEALTH_PATH = "/health"
METRICS_PATH = "/metrics"
MODELS_PATH = "/v1/models"
COMPLETIONS_PATH = "/v1/completions"

#: How to combine the series of one name across label sets (one per engine with
#: data parallelism): add counts and counters, take the worst of a ratio.
Aggregate = Literal["sum", "max"]

#: Sample field -> (aliases newest first, how to aggregate across engines).
METRICS: dict[str, tuple[tuple[str, ...], Aggregate]] = {
    "requests_running": (("vllm:num_requests_running",), "sum"),
    "requests_waiting": (("vllm:num_requests_waiting",), "sum"),
    "kv_cache_usage_ratio": (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "max"),
    "prompt_tokens_total": (("vllm:prompt_tokens_total",), "sum"),
    "generation_tokens_total": (("vllm:generation_tokens_total",), "sum"),
    "iteration_tokens_count_total": (("vllm:iteration_tokens_total_count",), "sum"),
    "preemptions_total": (("vllm:num_preemptions_total", "vllm:num_preemptions"), "sum"),
    "spec_decode_num_drafts_total": (("vllm:spec_decode_num_drafts_total",), "sum"),
    "spec_decode_num_draft_tokens_total": (("vllm:spec_decode_num_draft_tokens_total",), "sum"),
    "spec_decode_num_accepted_tokens_total": (
        ("vllm:spec_decode_num_accepted_tokens_total",),
        "sum",
    ),
    # Time per output token of each finished request (decode time / generated tokens):
    # its count and sum give the per-request decode rate, robust to the sampling of the
    # running-requests gauge and right with speculation (several tokens per step).
    "request_tpot_sum_seconds_total": (
        ("vllm:request_time_per_output_token_seconds_sum",),
        "sum",
    ),
    "request_tpot_count_total": (("vllm:request_time_per_output_token_seconds_count",), "sum"),
    # Only with VLLM_COMPUTE_NANS_IN_LOGITS=1 (v1/metrics/loggers.py): unknown otherwise.
    "corrupted_requests_total": (("vllm:corrupted_requests_total",), "sum"),
    "prefix_cache_queries_total": (("vllm:prefix_cache_queries_total",), "sum"),
    "prefix_cache_hits_total": (("vllm:prefix_cache_hits_total",), "sum"),
    # Requests finished, one series per finished_reason (stop, length, abort, error,
    # repetition in 0.32.0's scrape); only answered ones count (LABEL_SELECT).
    "requests_finished_total": (("vllm:request_success_total",), "sum"),
    # Waiting requests by reason (capacity, deferred); added after 0.11, present in 0.32.0.
    "requests_waiting_capacity": (("vllm:num_requests_waiting_by_reason",), "sum"),
    "requests_waiting_deferred": (("vllm:num_requests_waiting_by_reason",), "sum"),
}

#: Sample field -> (label, values, keep): of the series of that field's names, only those
#: whose label value is among ``values`` (``keep`` True) or is not (``keep`` False) count.
#: Sources: ``vllm:request_success_total{finished_reason}`` and
#: ``vllm:num_requests_waiting_by_reason{reason}`` in tests/fixtures/vllm/0.32.0/*.txt
#: (HELP: "'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient
#: constraints (LoRA budget, KV transfer, blocked status)").
LABEL_SELECT: dict[str, tuple[str, frozenset[str], bool]] = {
    "requests_finished_total": ("finished_reason", frozenset({"abort", "error"}), False),
    "requests_waiting_capacity": ("reason", frozenset({"capacity"}), True),
    "requests_waiting_deferred": ("reason", frozenset({"deferred"}), True),
}

#: Accepted draft tokens per draft position, one series per ``position`` label (0 first).
SPEC_ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
POSITION_LABEL = "position"

#: Process-title prefixes vLLM sets with setproctitle (``set_process_title`` in
#: vllm/utils/system_utils.py, called from v1/engine/core.py and
#: v1/executor/multiproc_executor.py; prefix ``VLLM_PROCESS_NAME_PREFIX``, default
#: ``VLLM``). Titles may carry a suffix (``VLLM::EngineCore_DP0``): match the prefix.
PROCESS_TITLES = {
    "engine_core": "VLLM::EngineCore",
    "worker": "VLLM::Worker",
}

"""The /metrics parser on a real vLLM 0.32.0 scrape, the alias table, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_supervisor.errors import MetricsParseError
from agent_supervisor.sense.engine_metrics import parse_metrics
from agent_supervisor.sense.names import METRICS
from agent_supervisor.telemetry.sample import Sample

FIXTURE = Path(__file__).parents[1] / "fixtures" / "vllm" / "0.32.0" / "mimo-mtp2.metrics.txt"


def test_real_scrape_exact_values() -> None:
    values = parse_metrics(FIXTURE.read_text())
    assert values == {
        "requests_running": 0.0,
        "requests_waiting": 0.0,
        "kv_cache_usage_ratio": 0.0,
        "prompt_tokens_total": 17.0,
        "generation_tokens_total": 64.0,
        "iteration_tokens_count_total": 64.0,
        "preemptions_total": 0.0,
        "spec_decode_num_drafts_total": 63.0,
        "spec_decode_num_draft_tokens_total": 126.0,
        "spec_decode_num_accepted_tokens_total": 0.0,
        "spec_decode_accepted_per_position_total": (0.0, 0.0),
        "request_tpot_sum_seconds_total": 0.005702275761904282,
        "request_tpot_count_total": 1.0,
        # The build does not compute NaNs in logits (VLLM_COMPUTE_NANS_IN_LOGITS unset):
        # the series is absent, so unknown, never 0.
        "corrupted_requests_total": None,
        "prefix_cache_queries_total": 17.0,
        "prefix_cache_hits_total": 0.0,
        # request_success_total: finished_reason="length" 1.0, the other reasons 0.0.
        "requests_finished_total": 1.0,
        "requests_waiting_capacity": 0.0,
        "requests_waiting_deferred": 0.0,
    }


def test_every_concept_is_a_sample_field() -> None:
    fields = set(Sample.__dataclass_fields__)
    assert set(METRICS) <= fields


def test_old_kv_cache_name_is_read_through_the_alias() -> None:
    old = ('# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage.\n'
           '# TYPE vllm:gpu_cache_usage_perc gauge\n'
           'vllm:gpu_cache_usage_perc{model_name="m"} 0.42\n')
    assert parse_metrics(old)["kv_cache_usage_ratio"] == 0.42


def test_new_name_wins_over_the_deprecated_one() -> None:
    both = ('vllm:gpu_cache_usage_perc{model_name="m"} 0.1\n'
            'vllm:kv_cache_usage_perc{model_name="m"} 0.9\n')
    assert parse_metrics(both)["kv_cache_usage_ratio"] == 0.9


def test_missing_series_is_unknown_not_zero() -> None:
    values = parse_metrics('vllm:num_requests_running{engine="0"} 3\n')
    assert values["requests_running"] == 3.0
    assert values["requests_waiting"] is None
    assert values["spec_decode_num_drafts_total"] is None


def test_series_of_several_engines_are_added_and_ratios_take_the_worst() -> None:
    text = ('vllm:num_requests_waiting{engine="0"} 2\nvllm:num_requests_waiting{engine="1"} 5\n'
            'vllm:kv_cache_usage_perc{engine="0"} 0.3\nvllm:kv_cache_usage_perc{engine="1"} 0.8\n')
    values = parse_metrics(text)
    assert values["requests_waiting"] == 7.0
    assert values["kv_cache_usage_ratio"] == 0.8


def test_malformed_text_raises_with_the_url() -> None:
    with pytest.raises(MetricsParseError) as info:
        parse_metrics("vllm:num_requests_running{engine=0 3\n", url="http://e/metrics")
    assert info.value.url == "http://e/metrics"


@given(st.text(max_size=300))
def test_parser_raises_only_its_own_error(text: str) -> None:
    try:
        values = parse_metrics(text)
    except MetricsParseError:
        return
    assert set(values) == {*METRICS, "spec_decode_accepted_per_position_total"}


V032 = FIXTURE.parent


@pytest.mark.parametrize("name, expected", [
    ("plain.busy", {"requests_running": 0.0, "generation_tokens_total": 2700.0,
                    "iteration_tokens_count_total": 901.0, "prompt_tokens_total": 150.0,
                    "spec_decode_num_drafts_total": None,
                    "spec_decode_accepted_per_position_total": None}),
    ("ngram.idle", {"generation_tokens_total": 3600.0, "spec_decode_num_drafts_total": 794.0,
                    "spec_decode_num_draft_tokens_total": 3970.0,
                    "spec_decode_num_accepted_tokens_total": 1971.0,
                    "spec_decode_accepted_per_position_total": (601.0, 503.0, 346.0, 276.0,
                                                                245.0)}),
    ("draft.busy", {"spec_decode_num_drafts_total": 1573.0,
                    "spec_decode_num_draft_tokens_total": 4719.0,
                    "spec_decode_num_accepted_tokens_total": 2028.0,
                    "spec_decode_accepted_per_position_total": (1115.0, 522.0, 391.0)}),
    ("mtp2.busy", {"requests_running": 4.0, "requests_waiting": 0.0,
                   "kv_cache_usage_ratio": 0.0011903671824924356,
                   "spec_decode_num_drafts_total": 1041.0,
                   "spec_decode_num_accepted_tokens_total": 3.0,
                   "spec_decode_accepted_per_position_total": (3.0, 0.0)}),
])
def test_each_speculative_mode(name: str, expected: dict) -> None:
    values = parse_metrics((V032 / f"{name}.metrics.txt").read_text())
    for key, value in expected.items():
        assert values[key] == value, key


def test_older_vllm_from_its_documented_names() -> None:
    text = (V032.parent / "0.8.5-documented" / "metrics.txt").read_text()
    values = parse_metrics(text)
    assert values["kv_cache_usage_ratio"] == 0.875          # vllm:gpu_cache_usage_perc
    assert values["preemptions_total"] == 7.0
    assert values["iteration_tokens_count_total"] == 30111.0
    assert values["spec_decode_num_accepted_tokens_total"] == 9300.0
    assert values["spec_decode_num_drafts_total"] is None   # V1-only: unknown, not 0
    assert values["spec_decode_accepted_per_position_total"] is None

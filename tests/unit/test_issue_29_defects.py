"""Issue 29, item 6: defects found on the way, each replayed through the real ``decide()``.

- b. ``telemetry_degraded`` expects only the series the engine's profile exports
  (``agent_supervisor.telemetry.engine_series``): llama-server has no preemption counter and
  no KV-cache series (llama.cpp #13660, #22879), vLLM has both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_supervisor.decide.decision import Decision
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.policy import Policy, load_policy_file
from agent_supervisor.sense.engine_metrics import parse_metrics
from agent_supervisor.sense.profiles import profile_for
from agent_supervisor.telemetry.engine_series import ENGINE_SERIES
from tests.unit.scenario import POLICY, play, samples

ROOT = Path(__file__).resolve().parents[2]
SCRAPES = {"vllm": ROOT / "tests/fixtures/vllm/0.32.0/mtp2.busy.metrics.txt",
           "llama_cpp": ROOT / "tests/fixtures/llamacpp/0.3.36/metrics.txt"}


def _scraped(kind: str) -> dict[str, Any]:
    """The Sample fields the engine's recorded scrape fills, read through its profile."""
    profile = profile_for(kind)
    values = parse_metrics(SCRAPES[kind].read_text(), table=profile.metrics,
                           per_position=profile.per_position_metric)
    return {k: v for k, v in values.items() if v is not None}


def _stream(kind: str, **drop: None) -> dict[str, Any]:
    """An engine serving for 300 s with every series its scrape has (counters moving)."""
    fields: dict[str, Any] = {**_scraped(kind), **drop}
    for name, value in list(fields.items()):
        if name.endswith("_total") and isinstance(value, float):
            fields[name] = lambda t, v=value: v + 10 * t
        elif isinstance(value, tuple):
            fields[name] = lambda t, v=value: tuple(x + 2 * t for x in v)
    return fields


def _degraded(decisions: list[Decision]) -> list[dict[str, Any]]:
    return [f.evidence for d in decisions for f in d.findings if f.kind == "telemetry_degraded"]


def _play(policy: Policy, fields: dict[str, Any]) -> list[Decision]:
    decisions, _ = play(samples(0, 300, 5.0, **fields), LadderState(0, since_s=0), policy)
    return decisions


def test_issue_29_profiles_declare_the_series_their_scrapes_fill() -> None:
    for kind, path in SCRAPES.items():
        profile = profile_for(kind)
        assert profile.series == ENGINE_SERIES[kind]
        assert profile.series <= {*profile.metrics, "spec_decode_accepted_per_position_total"}
        assert profile.series <= set(_scraped(kind)), path
    assert {"preemptions_total", "kv_cache_usage_ratio"} & ENGINE_SERIES["llama_cpp"] == set()


def test_issue_29_llama_server_with_all_its_series_is_not_degraded() -> None:
    policy = load_policy_file(ROOT / "policies" / "gb10-llamacpp.yaml")
    assert policy.engine.kind == "llama_cpp" and policy.modes[0].speculative
    decisions = _play(policy, _stream("llama_cpp"))
    assert decisions[-1].rung == 0       # served 300 s in its speculative mode, no step
    assert _degraded(decisions) == []


def test_issue_29_vllm_without_a_series_it_exports_is_still_degraded() -> None:
    assert POLICY.engine.kind == "vllm"
    decisions = _play(POLICY, _stream("vllm", preemptions_total=None))
    seen = _degraded(decisions)
    assert seen and seen[0]["missing"] == ["preemptions_total"]
    assert seen[0]["guards"] == ["preemption_storm"]
    assert _degraded(_play(POLICY, _stream("vllm"))) == []     # all there: none

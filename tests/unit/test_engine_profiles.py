"""Issue 15: engine profiles. vLLM stays the default and unchanged; llama-server's flags,
metrics (a scrape recorded from the real 0.3.36 binary), probes and log lines.

Fixtures: tests/fixtures/llamacpp/0.3.36/README.md says how each was captured.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from agent_supervisor.errors import PolicyError
from agent_supervisor.policy.engine_flags import flag_rules
from agent_supervisor.policy.load import load_policy, load_policy_file
from agent_supervisor.policy.model import build_argv
from agent_supervisor.sense.engine_log import classify_engine_line
from agent_supervisor.sense.engine_metrics import parse_metrics
from agent_supervisor.sense.profiles import profile_for

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
LLAMA = FIXTURES / "llamacpp" / "0.3.36"
LLAMA_POLICY = ROOT / "policies" / "cpu-demo-llamacpp.yaml"


def llama_policy(**modes: dict) -> str:
    data = yaml.safe_load(LLAMA_POLICY.read_text())
    if modes:
        data["modes"] = [{"name": n, "args": a} for n, a in modes.items()]
    return yaml.safe_dump(data)


def test_vllm_is_the_default_and_its_argv_is_unchanged() -> None:
    policy = load_policy_file(ROOT / "policies" / "cpu-demo.yaml")
    assert policy.engine.kind == "vllm"
    argv = build_argv(policy, policy.modes[0])
    assert argv[-6:] == ["--host", "127.0.0.1", "--port", "8000", "--shutdown-timeout", "10"]
    assert [m.speculative for m in policy.modes] == [True, True, False, False]
    assert policy.modes[0].fallbacks and policy.max_num_seqs(3) == 2


def test_llama_cpp_argv_ends_with_host_port_and_metrics() -> None:
    policy = load_policy_file(LLAMA_POLICY)
    argv = build_argv(policy, policy.modes[0])
    assert argv[0].endswith(".llamacpp/bin/llama-server")
    assert argv[-5:] == ["--host", "127.0.0.1", "--port", "8000", "--metrics"]
    assert "--shutdown-timeout" not in argv
    assert [m.speculative for m in policy.modes] == [True, True, False, False]
    assert [policy.max_num_seqs(i) for i in range(4)] == [4, 4, 4, 2]
    assert policy.first_plain_rung_below(0) == 2
    assert policy.first_rung_with_fewer_sequences_below(0) == 3
    assert policy.first_rung_sparing_large_batches_below(0) == 2
    # vLLM's start-up fallbacks are vLLM flags: none by default for llama-server.
    assert all(m.fallbacks == () for m in policy.modes)


@pytest.mark.parametrize(("args", "speculative"), [
    (["--spec-type", "draft-simple", "--model-draft", "d.gguf"], True),
    (["--spec-type=ngram-simple"], True),
    (["--spec-type", "none"], False),
    (["--spec-type", "none,ngram-mod"], True),
    (["-md", "d.gguf"], True),                       # older builds: -md alone speculates
    (["--spec-draft-model", "d.gguf", "--spec-type", "none"], False),
    (["--draft-max", "16", "--draft-min", "4"], False),   # old length knobs alone
    (["--spec-draft-n-max", "4"], False),
    (["-lcs", "static.bin"], True),                  # lookup decoding
    (["--parallel", "4", "-c", "4096"], False),
])
def test_llama_cpp_speculation_in_flags_old_and_new_spellings(args: list[str],
                                                              speculative: bool) -> None:
    assert flag_rules("llama_cpp").speculative(args) is speculative


def test_vllm_speculation_is_its_config_only() -> None:
    rules = flag_rules("vllm")
    assert rules.speculative({"--speculative-config": {"method": "ngram"}})
    assert not rules.speculative({"--model-draft": "x", "--spec-type": "draft-simple"})


@pytest.mark.parametrize(("modes", "message"), [
    ({"a": {"--model-draft": "d.gguf"}}, "--model-draft without --spec-type"),
    ({"a": {"--spec-type": "draft-fancy"}}, "'draft-fancy' is not one of"),
    ({"a": {"--metrics": True}}, "--metrics is set by the supervisor"),
    ({"a": {"--parallel": -1}}, "--parallel must be an integer >= 0"),
])
def test_llama_cpp_mode_flags_refused_with_the_mode_named(modes: dict, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        load_policy(llama_policy(**modes), source="p.yaml")
    assert message in str(err.value) and "modes[0].args" in str(err.value)


def test_speculation_in_the_engine_args_is_refused_for_llama_cpp() -> None:
    data = yaml.safe_load(LLAMA_POLICY.read_text())
    data["engine"]["args"] += ["-md", "d.gguf"]
    with pytest.raises(PolicyError, match="belongs in the modes"):
        load_policy(yaml.safe_dump(data), source="p.yaml")
    data["engine"]["args"] = ["--port", "9"]
    with pytest.raises(PolicyError, match="--port is set by the supervisor"):
        load_policy(yaml.safe_dump(data), source="p.yaml")


def test_the_stop_waits_for_the_drain_only_where_sigterm_drains() -> None:
    vllm = load_policy_file(ROOT / "policies" / "cpu-demo.yaml").engine
    llama = load_policy_file(LLAMA_POLICY).engine
    assert flag_rules("vllm").stop_wait_seconds(vllm) == 10 + 10
    assert flag_rules("llama_cpp").stop_wait_seconds(llama) == llama.stop_grace_seconds == 5


def test_decide_imports_no_engine_profile() -> None:
    """decide/ stays engine-neutral: it reads Sample fields and Mode.speculative only."""
    for path in sorted((ROOT / "agent_supervisor" / "decide").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module not in ("agent_supervisor.policy.engine_flags",
                                           "agent_supervisor.sense.profiles")
                assert not node.module.startswith("agent_supervisor.sense"), path


LLAMA_LINES = (FIXTURES / "engine_log" / "llamacpp-signatures.txt").read_text().splitlines()
LLAMA_TAGS = ["ggml_assert"] * 3 + ["bad_argument:--bogus-flag", "model_not_found"]


@pytest.mark.parametrize(("line", "tag"), list(zip(LLAMA_LINES, LLAMA_TAGS, strict=True)))
def test_llama_cpp_lines_get_their_tag(line: str, tag: str) -> None:
    assert classify_engine_line(line) == (tag,)
    assert tag.split(":")[0] in profile_for("llama_cpp").log_tags


@pytest.mark.parametrize("line", (FIXTURES / "engine_log" / "llamacpp-benign.txt")
                         .read_text().splitlines())
def test_llama_cpp_benign_lines_get_no_tag(line: str) -> None:
    assert classify_engine_line(line) == ()


def test_the_recorded_llama_server_scrape_read_with_its_aliases() -> None:
    profile = profile_for("llama_cpp")
    values = parse_metrics((LLAMA / "metrics.txt").read_text(), table=profile.metrics,
                           per_position=profile.per_position_metric)
    assert values == {
        "requests_running": 0.0, "requests_waiting": 0.0, "kv_cache_usage_ratio": None,
        "prompt_tokens_total": 19.0, "generation_tokens_total": 96.0,
        "iteration_tokens_count_total": 36.0, "spec_decode_num_drafts_total": 33.0,
        "spec_decode_num_draft_tokens_total": 132.0,
        "spec_decode_num_accepted_tokens_total": 60.0,
        "spec_decode_accepted_per_position_total": (33.0, 9.0, 9.0, 9.0),
    }
    # vLLM's names are not there: every vLLM concept is unknown, never 0.
    vllm = parse_metrics((LLAMA / "metrics.txt").read_text())
    assert all(v is None for v in vllm.values())


def test_the_recorded_slots_say_speculative_per_slot() -> None:
    slots = json.loads((LLAMA / "slots.json").read_text())
    assert [s["speculative"] for s in slots] == [True] * 4
    assert {s["n_ctx"] for s in slots} == {1024}          # --ctx-size 4096 over 4 slots


def test_the_recorded_llama_server_logs_are_classified() -> None:
    run = (LLAMA / "server-draft4.log").read_text().splitlines()
    assert [line for line in run if classify_engine_line(line)] == []
    bad = (LLAMA / "start-bad-flag.txt").read_text().splitlines()
    assert [classify_engine_line(line) for line in bad if classify_engine_line(line)] == [
        ("bad_argument:--bogus-flag",)]
    missing = (LLAMA / "start-missing-model.txt").read_text().splitlines()
    assert {t for line in missing for t in classify_engine_line(line)} == {"model_not_found"}

"""The vLLM log line classifier on recorded lines and whole real vLLM 0.32.0 logs.

Fixtures and the source of every line: tests/fixtures/engine_log/README.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_supervisor.sense.engine_log import SIGNATURES, Signature, classify_engine_line

FIXTURES = Path(__file__).parents[1] / "fixtures" / "engine_log"

REQUIRED_TAGS = {
    "model_files_corrupt",
    "checkpoint_incompatible",
    "driver_mismatch",
    "compile_cache_corrupt",
    "nccl_fabric",
    "cuda_illegal_memory_access",
    "device_side_assert",
    "engine_dead",
    "worker_died",
    "rpc_timeout",
    "out_of_memory",
    "insufficient_memory_at_startup",
    "cuda_graph_capturing",
    "cuda_graph_captured",
    "cuda_graph_capture_oom",
    "bad_argument",
    "model_not_found",
    "nccl_init_failed",
    "structured_output_fsm",
    "ggml_assert",
    "container_refused",
}


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


SIGNATURE_LINES = lines("signatures.txt")
SIGNATURE_TAGS = (
    ["cuda_illegal_memory_access"] * 3
    + ["device_side_assert"] * 3
    + ["engine_dead"] * 4
    + ["worker_died"] * 3
    + ["rpc_timeout"] * 2
    + ["out_of_memory"] * 2
    + ["insufficient_memory_at_startup"] * 4
    + ["structured_output_fsm"] * 2
)
RECONSTRUCTED_TAGS = (
    ["worker_died", "engine_dead", "out_of_memory", "out_of_memory"]
    + ["insufficient_memory_at_startup"] * 5
)


@pytest.mark.parametrize(
    ("line", "tag"), list(zip(SIGNATURE_LINES, SIGNATURE_TAGS, strict=True))
)
def test_recorded_lines_get_their_tag(line: str, tag: str) -> None:
    assert classify_engine_line(line) == (tag,)


@pytest.mark.parametrize(
    ("line", "tag"), list(zip(lines("reconstructed.txt"), RECONSTRUCTED_TAGS, strict=True))
)
def test_lines_reconstructed_from_vllm_format_strings_get_their_tag(line: str, tag: str) -> None:
    assert classify_engine_line(line) == (tag,)


@pytest.mark.parametrize("line", lines("benign.txt"))
def test_benign_lines_get_no_tag(line: str) -> None:
    assert classify_engine_line(line) == ()


def test_whole_log_where_engine_core_died() -> None:
    """Every line of a real 0.32.0 run is quiet except the EngineDeadError at the end."""
    log = lines("cpu-demo-0.32.0-mimo-mtp2-core-died.txt")
    tagged = [(n, classify_engine_line(line)) for n, line in enumerate(log) if
              classify_engine_line(line)]
    assert tagged == [(len(log) - 1, ("engine_dead",))]
    assert "engine core exited unexpectedly" in "\n".join(log)  # present, and not tagged


def test_whole_log_of_a_planned_stop_is_quiet() -> None:
    log = lines("cpu-demo-0.32.0-mimo-mtp2-stopped.txt")
    assert len(log) > 100
    assert [line for line in log if classify_engine_line(line)] == []


def test_one_line_can_carry_two_tags_in_table_order() -> None:
    """A traceback's last line can name a dead engine and its cause (e.g. an OOM)."""
    line = ("vllm.v1.engine.exceptions.EngineDeadError: ... torch.OutOfMemoryError: CUDA out of "
            "memory. Tried to allocate 2.00 GiB")
    assert classify_engine_line(line) == ("engine_dead", "out_of_memory")


def test_the_table() -> None:
    assert {s.tag for s in SIGNATURES} == REQUIRED_TAGS
    assert all(isinstance(s, Signature) and s.source for s in SIGNATURES)
    speculative = {s.tag for s in SIGNATURES if s.speculative}
    assert speculative == {"cuda_illegal_memory_access", "device_side_assert",
                           "structured_output_fsm", "ggml_assert"}


def test_every_signature_matches_a_fixture_line() -> None:
    corpus = [line for path in sorted(FIXTURES.glob("*.txt")) for line in lines(path.name)]
    for signature in SIGNATURES:
        assert any(signature.pattern.search(line) for line in corpus), signature.pattern.pattern


@given(st.text(max_size=400))
def test_never_raises(text: str) -> None:
    tags = classify_engine_line(text)
    assert isinstance(tags, tuple)
    assert set(tags) <= REQUIRED_TAGS
    assert len(tags) == len(set(tags))


STARTUP_TAGS = ["cuda_graph_capturing", "cuda_graph_capturing", "cuda_graph_captured",
                "cuda_graph_capture_oom", "nccl_init_failed", "model_not_found",
                "model_not_found", "bad_argument", "cuda_graph_capturing", "out_of_memory",
                "cuda_graph_capturing"]


@pytest.mark.parametrize(("line", "tag"), list(zip(lines("startup.txt"), STARTUP_TAGS,
                                                   strict=True)))
def test_issue_12_start_up_failure_lines_get_their_class(line: str, tag: str) -> None:
    assert classify_engine_line(line) == (tag,)


def test_issue_12_vllms_capture_hint_is_the_phase_not_an_oom() -> None:
    hint = ("INFO 04-12 08:22:05 [model_runner.py:1456] Capturing cudagraphs for decoding. "
            "This may lead to unexpected consequences if the model is not static. To run the "
            "model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' in the "
            "CLI. If out-of-memory error occurs during cudagraph capture, consider decreasing "
            "`gpu_memory_utilization` or switching to eager mode.")
    assert classify_engine_line(hint) == ("cuda_graph_capturing",)


@pytest.mark.parametrize(("line", "tag"), [
    ("api_server.py: error: unrecognized arguments: --bogus-flag 3",
     "bad_argument:--bogus-flag"),
    ("api_server.py: error: argument --max-num-seqs: invalid int value: 'many'",
     "bad_argument:--max-num-seqs"),
    ("vllm serve: error: argument --kv-cache-dtype: invalid choice: 'fp9' (choose from auto)",
     "bad_argument:--kv-cache-dtype"),
])
def test_issue_12_a_refused_argument_names_its_flag(line: str, tag: str) -> None:
    """argparse's own texts (Lib/argparse.py ArgumentParser.error)."""
    assert classify_engine_line(line) == (tag,)


def test_issue_12_the_wait_for_core_loop_is_not_progress() -> None:
    from agent_supervisor.sense.engine_log import is_progress
    wait = ("(APIServer pid=24482) DEBUG 07-15 07:11:34 [v1/engine/utils.py:1239] Waiting for "
            "1 local, 0 remote core engine proc(s) to start.")
    assert not is_progress(wait)
    assert not is_progress("   ")
    assert is_progress("(EngineCore pid=1) INFO Loading weights took 549.60 seconds")


def test_issue_12_the_real_cpu_engines_start_failures() -> None:
    bad, hf, oserror = lines("cpu-0.32.0-start-failures.txt")
    assert classify_engine_line(bad) == ("bad_argument:--bogus-flag",)
    assert classify_engine_line(hf) == ("model_not_found",)
    assert classify_engine_line(oserror) == ("model_not_found",)


ISSUE_29_TAGS = ["model_files_corrupt", "model_files_corrupt", "checkpoint_incompatible",
                 "driver_mismatch", "compile_cache_corrupt", "nccl_fabric",
                 "model_files_corrupt", "compile_cache_corrupt", "compile_cache_corrupt"]


@pytest.mark.parametrize(("line", "tag"), list(zip(lines("start-failures-issue-29.txt"),
                                                   ISSUE_29_TAGS, strict=True)))
def test_issue_29_start_failures_no_rung_fixes_get_their_class(line: str, tag: str) -> None:
    assert classify_engine_line(line) == (tag,)

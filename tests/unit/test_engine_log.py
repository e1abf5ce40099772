"""The vLLM log line classifier on recorded lines and whole real vLLM 0.32.0 logs.

Fixtures and the source of every line: tests/fixtures/engine_log/README.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.sense.engine_log import SIGNATURES, Signature, classify_engine_line

FIXTURES = Path(__file__).parents[1] / "fixtures" / "engine_log"

REQUIRED_TAGS = {
    "cuda_illegal_memory_access",
    "device_side_assert",
    "engine_dead",
    "worker_died",
    "rpc_timeout",
    "out_of_memory",
    "insufficient_memory_at_startup",
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
    assert speculative == {"cuda_illegal_memory_access", "device_side_assert"}


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

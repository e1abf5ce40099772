"""Issue 34: one engine-log regex took 9.1 s on a 60 KB line (the review's figure; the
device-side assert signature took 60 s here on repeated fragments of its own), and the
log-tail masking 307 s on "a-a-a-...". Python's re holds the GIL, so such a line stalls
every tick. Every engine-log signature and every masking pattern is timed on 60 KB
lines of pathological shapes. A complexity check: the bound is generous (a linear scan
takes milliseconds; the quadratic ones took seconds to minutes). Timed in this thread's CPU
seconds (time.thread_time), not wall seconds: on a box loaded by other processes the wall
figure of a linear scan passed the bound (2026-12-03, load 8 on 2 cores), its CPU time
cannot grow with the neighbours."""

from __future__ import annotations

import time

import pytest

from agent_supervisor.privacy import _TEXT_PATTERNS, mask_text
from agent_supervisor.sense.engine_log import NOT_PROGRESS, SIGNATURES, classify_engine_line

N = 60_000
BOUND_SECONDS = 0.5


def _rep(fragment: str) -> str:
    return (fragment * (N // len(fragment) + 1))[:N]


# Runs of one character class, and repeats of the patterns' own fragments (a regex with
# a gap backtracks most on a line where its start matches everywhere and its end nowhere).
SHAPES = {name: _rep(fragment) for name, fragment in {
    "spaces": " ", "digits": "1", "letters": "a", "dashes": "-", "a-": "a-", "a.": "a.",
    "a=": "a=", "quotes": "'", "brackets": "[", "colons": ":", "tabs": "\t",
    "cu": ".cu:1: ", "cu-block": ".cu:1: block: [1,1,1], thread: [1,1,1] Assertion ",
    "ray": "RayWorkerProc rank=", "ggml": "GGML_ASSERT(", "request": "Request x ",
    "error": "error: argument --a", "unrecognized": "error: unrecognized arguments: -",
    "validation": "ValidationError: 1 validation error for ", "worker": "Worker proc ",
    "waiting": "Waiting for 1 local, 1 ", "flags": "--a", "quoted-flags": "'--a",
    "secret-flag": "--api-key", "quoted-secret": "'--api-key', ", "key": "'api_key'",
    "bearer": "Bearer ", "token": "token",
}.items()}

PATTERNS = [(s.tag, s.pattern) for s in SIGNATURES] + [("not_progress", NOT_PROGRESS)] + [
    (f"mask[{i}]", p) for i, p in enumerate(_TEXT_PATTERNS)]


@pytest.mark.parametrize(("tag", "pattern"), PATTERNS,
                         ids=[f"{i}-{tag}" for i, (tag, _) in enumerate(PATTERNS)])
def test_issue_34_every_pattern_scans_60_kb_lines_in_linear_time(tag, pattern) -> None:
    t0 = time.thread_time()
    slowest = (0.0, "")
    for name, line in SHAPES.items():
        t = time.thread_time()
        pattern.search(line)
        slowest = max(slowest, (time.thread_time() - t, name))
    total = time.thread_time() - t0
    assert total < BOUND_SECONDS, f"{tag}: {total:.2f} s in all (slowest {slowest})"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_issue_34_classifying_and_masking_a_60_kb_line_is_bounded(shape: str) -> None:
    line = SHAPES[shape]
    t = time.thread_time()
    classify_engine_line(line)
    classified = time.thread_time() - t
    t = time.thread_time()
    mask_text(line)
    masked = time.thread_time() - t
    assert classified < BOUND_SECONDS and masked < BOUND_SECONDS, (classified, masked)


def test_issue_34_the_bounded_signatures_still_match_real_lines() -> None:
    lines = {
        "device_side_assert": "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: "
                              "operator(): block: [0,0,0], thread: [0,0,0] Assertion "
                              "`-sizes[i] <= index && index < sizes[i] && \"index out of "
                              "bounds\"` failed.",
        "worker_died": "ERROR RayWorkerProc rank=3 pid=4242 died unexpectedly",
        "ggml_assert": "common/sampling.cpp:635: GGML_ASSERT(idxs.size() == "
                       "draft.size() + 1) failed",
    }
    for tag, line in lines.items():
        assert tag in classify_engine_line(line), (tag, classify_engine_line(line))
    assert mask_text("HF_TOKEN=hf_x api_key=y --api-key z") == \
        "HF_TOKEN=*** api_key=*** --api-key ***"

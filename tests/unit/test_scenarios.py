"""Issue 12: closed-loop scenarios (tests/fixtures/scenarios/) run the real decide() and the
real ladder against a world that answers (SIGTERM ignored, survivors of SIGKILL, memory
back late or never, a start that fails with a log line); and replay re-classifies the raw
lines a trace carries with today's classifiers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.replay import load_scenario, replay, replay_scenario
from agent_supervisor.policy import load_policy_file
from agent_supervisor.sense.reclassify import reclassify
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample

ROOT = Path(__file__).parents[2]
SCENARIOS = ROOT / "tests" / "fixtures" / "scenarios"
POLICY = load_policy_file(ROOT / "policies" / "gb10-nvfp4-mtp.yaml")


def run(name: str):
    path = SCENARIOS / f"{name}.yaml"
    steps = replay_scenario(load_scenario(yaml.safe_load(path.read_text()), source=str(path)),
                            POLICY, reclassify)
    acted = [(st.t_s, st.decision) for st in steps if st.decision.action is not Action.HOLD]
    return steps, acted


def kinds(steps, t0=0.0):
    return {f.kind for st in steps if st.t_s >= t0 for f in st.decision.findings}


def test_issue_12_sigterm_ignored_is_killed_after_the_grace_and_recorded() -> None:
    _steps, acted = run("sigterm_ignored")
    (t_down, down), (t_start, start) = acted[1], acted[2]
    assert (down.action, down.operator) == (Action.STEP_DOWN, True) and t_down == 60
    grace = POLICY.engine.shutdown_timeout_seconds + POLICY.engine.stop_grace_seconds
    assert t_start == 60 + grace                     # SIGKILL after the grace, then start
    assert "sigterm_ignored" in [f.kind for f in start.findings]


def test_issue_12_memory_back_after_20_s_holds_the_start_20_s() -> None:
    steps, acted = run("memory_returns_late")
    assert [(t, d.action) for t, d in acted] == [(0, Action.START), (60, Action.RESTART),
                                                (80, Action.START)]
    assert "memory_not_back" in kinds(steps, 61)
    assert "memory_pinned_reboot_required" not in kinds(steps)


def test_issue_12_memory_that_never_comes_back_holds_for_good() -> None:
    steps, acted = run("memory_never_returns")
    timeout = POLICY.lifecycle.memory_return_timeout_seconds
    assert [d.action for _, d in acted] == [Action.START, Action.RESTART,
                                            Action.REBOOT_REQUIRED]
    assert timeout <= acted[2][0] - acted[1][0] <= timeout + 2
    assert acted[2][1].findings[0].kind == "memory_pinned_reboot_required"
    # No restart loop afterwards: every later decision holds, saying why.
    assert all("reboot required" in st.decision.explanation for st in steps
               if st.t_s > acted[2][0])


def test_issue_12_survivors_of_sigkill_stop_the_ladder_at_once() -> None:
    _steps, acted = run("survivors_after_sigkill")
    assert [(t, d.action) for t, d in acted] == [(0, Action.START), (60, Action.RESTART),
                                                (61, Action.REBOOT_REQUIRED)]
    assert acted[-1][1].findings[0].kind == "gpu_wedged_reboot_required"


def test_issue_12_a_start_that_fails_for_memory_retries_fitted_and_serves() -> None:
    steps, acted = run("start_fails_then_fallback")
    (_, retry), (_, start) = acted[1], acted[2]
    assert retry.action is Action.RESTART and retry.fallback is not None
    util = dict(start.start_args)["--gpu-memory-utilization"]
    assert 0.5 < util < 0.6                          # (75 - 4 GiB margin) / 128 GiB
    assert steps[-1].decision.explanation.startswith("engine ready")


@pytest.mark.parametrize(("data", "message"), [
    ({"on_sigterm": "maybe"}, "on_sigterm"),
    ({"on_start": [{"ready_after_seconds": "soon"}]}, "on_start.0.ready_after_seconds"),
    ({"typo": 1}, "typo"),
])
def test_issue_12_a_bad_scenario_names_file_and_field(data, message) -> None:
    with pytest.raises(ValueError, match=f"s.yaml: {message}"):
        load_scenario(data, source="s.yaml")


def test_issue_12_replay_rejudges_raw_lines_with_todays_classifier() -> None:
    """A trace recorded before a signature existed (no tags, only the raw line) is judged
    by the current classifier: here the start-up OOM during graph capture."""
    line = "RuntimeError: CUDA error: out of memory"
    recorded = [
        {"type": "header", "rung": 0},
        Sample(t_s=0, engine_state=EngineState.STARTING, engine_state_since_s=0,
               engine_run_id="r1", engine_rung=0, engine_was_ready=False,
               engine_log_lines=("    self.cuda_graph.capture_end()",)).to_dict(),
        Sample(t_s=1, engine_state=EngineState.CRASHED, engine_state_since_s=1,
               engine_run_id="r1", engine_rung=0, engine_was_ready=False,
               engine_crash_reason="start_failed", engine_leftover_pids=(),
               engine_log_lines=(line,)).to_dict(),
    ]
    for rec in recorded[1:]:
        rec["type"] = "sample"
    old = replay(recorded, POLICY)
    new = replay(recorded, POLICY, reclassify=reclassify)
    assert "startup_cuda_graph_oom" not in {f.kind for f in old[-1].decision.findings}
    assert new[-1].decision.findings[0].kind == "startup_cuda_graph_oom"
    assert new[-1].decision.fallback == 0

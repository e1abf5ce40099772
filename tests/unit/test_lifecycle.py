"""Issue 12: the edges of the engine's life, decided by the real ``decide()`` on hand-written
traces (the public-report cases are in tests/fixtures/field/)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.ladder import LadderState, advance, resume
from agent_supervisor.decide.lifecycle import (
    learn_start_budgets,
    rung_after_unclean_start,
    rung_without_flag,
)
from agent_supervisor.decide.recommended import xid_action
from agent_supervisor.policy import load_policy
from agent_supervisor.states import EngineState
from tests.helpers.guards import BASELINES, decoding
from tests.unit.scenario import POLICY, POLICY_YAML, GiB, decide_on, play, samples

STARTING = {"engine_state": EngineState.STARTING, "engine_was_ready": False}


def crashed_start(t: float, lines: list[str], **kw):
    from agent_supervisor.sense.reclassify import engine_tags
    return samples(t, t, engine_state=EngineState.CRASHED, engine_state_since_s=t,
                   engine_crash_reason="start_failed", engine_was_ready=False,
                   engine_leftover_pids=(), engine_log_lines=tuple(lines),
                   engine_log_tags=engine_tags(lines), **kw)


def test_issue_12_unknown_load_is_never_calm() -> None:
    """A step down that waits for a calm moment does not take a missing series for calm."""
    busy = samples(0, 200, **decoding(150.0))
    unknown = [*busy[:-1], dataclasses.replace(busy[-1], requests_running=None,
                                               requests_waiting=None)]
    d = decide_on(unknown, baselines=BASELINES)
    assert d.action is Action.HOLD and "deferred to a calm moment" in d.explanation
    calm = busy[:-1] + samples(200, 200, **decoding(150.0, running=1.0))
    assert decide_on(calm, baselines=BASELINES).action is Action.STEP_DOWN


def test_issue_12_fallbacks_are_bounded_per_start_then_the_crash_path_takes_over() -> None:
    """Three capture OOMs in a row: smaller sizes, then eager, then (no memory reading to
    size a third) an ordinary failed start that counts toward the start limit."""
    oom = ["    self.cuda_graph.capture_end()", "RuntimeError: CUDA error: out of memory"]
    ladder = LadderState(rung=0)
    taken = []
    for n in range(3):
        run = f"r{n}"
        trace = samples(0, 5, run=run, **STARTING) + crashed_start(6, oom, run=run)
        decisions, ladder = play(trace, ladder)
        taken.append(next(d for d in decisions if d.action is not Action.HOLD))
    assert [d.fallback for d in taken] == [0, 1, None]
    assert dict(taken[1].start_args) == {"--max-cudagraph-capture-size": 16,
                                         "--enforce-eager": True}
    assert taken[2].action is Action.RESTART and "crash 1 of mode" in taken[2].explanation
    assert ladder.fallbacks_tried == (0, 1)


def test_issue_12_a_start_uses_the_fallback_flags_and_a_rung_change_clears_them() -> None:
    ladder = LadderState(rung=0, start_args=(("--enforce-eager", True),), fallbacks_tried=(1,))
    stopped = samples(0, 0, engine_state=EngineState.STOPPED, engine_leftover_pids=())
    d = decide_on(stopped, ladder)
    assert d.action is Action.START and d.start_args == (("--enforce-eager", True),)
    moved = advance(ladder, dataclasses.replace(d, action=Action.STEP_DOWN, rung=1), POLICY, 1)
    assert (moved.start_args, moved.fallbacks_tried) == ((), ())


def test_issue_12_kv_cache_bytes_are_halved_within_what_was_free() -> None:
    policy = load_policy(POLICY_YAML.replace("{name: mtp2, args: {", "{name: mtp2, args: "
                                             "{--kv-cache-memory-bytes: 8589934592, "))
    line = ["ValueError: Free memory on device cuda:0 (10.0/121.69 GiB) on startup is less "
            "than desired GPU memory utilization (0.9, 109.5 GiB)."]
    trace = samples(0, 3, **STARTING) + crashed_start(
        4, line, mem_available_before_launch_bytes=20 * GiB, mem_total_bytes=128 * GiB)
    d = decide_on(trace, policy=policy)
    assert d.action is Action.RESTART and d.fallback is not None
    assert dict(d.start_args) == {"--kv-cache-memory-bytes": 4 * GiB}


def test_issue_12_no_memory_reading_no_memory_fallback() -> None:
    line = ["ValueError: Free memory on device cuda:0 (10.0/121.69 GiB) on startup is less "
            "than desired GPU memory utilization (0.9, 109.5 GiB)."]
    d = decide_on(samples(0, 3, **STARTING) + crashed_start(4, line))
    assert d.action is Action.RESTART and d.fallback is None      # an ordinary failed start
    assert d.findings[0].kind == "start_failed"


def test_issue_12_a_long_start_with_progress_is_never_killed_the_learned_budget_counts() -> None:
    # 2000 s of start-up with CPU work and no log line: never stuck.
    working = samples(0, 2000, 10, engine_cpu_seconds_total=lambda t: t * 0.5, **STARTING)
    assert decide_on(working).action is Action.HOLD
    # Quiet since 100 s: stuck after the floor (engine.start_timeout_seconds, 300 s) ...
    quiet = samples(0, 450, 10, engine_cpu_seconds_total=lambda t: min(t, 100) * 0.5,
                    **STARTING)
    d = decide_on(quiet)
    assert d.action is Action.RESTART and d.findings[0].kind == "start_timeout"
    assert d.findings[0].evidence["budget_from"] == "engine.start_timeout_seconds"
    # ... but not while the mode's learned budget (2 x its longest start: 600 s) runs.
    learned = LadderState(rung=0, start_budgets=learn_start_budgets(
        [("mtp2", 250.0), ("mtp2", 300.0), ("safe", 40.0)], 2.0))
    assert learned.start_budget("mtp2") == 600.0
    assert decide_on(quiet, learned).action is Action.HOLD
    assert decide_on(samples(0, 710, 10, engine_cpu_seconds_total=lambda t: min(t, 100) * 0.5,
                             **STARTING), learned).action is Action.RESTART


def test_issue_12_the_sensors_progress_mark_outlives_the_window() -> None:
    quiet = samples(0, 350, 10, engine_progress_s=20.0, **STARTING)
    assert decide_on(quiet).action is Action.RESTART
    assert decide_on(samples(0, 350, 10, engine_progress_s=100.0, **STARTING)).action \
        is Action.HOLD


def test_issue_12_reboot_required_holds_until_the_operator_resumes() -> None:
    xid = samples(0, 3, kernel_events=("xid:79",), kernel_lines=(
        "NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.",))
    decisions, ladder = play(xid + samples(4, 60, engine_state=EngineState.STOPPED,
                                           engine_leftover_pids=()), LadderState(rung=0))
    assert decisions[0].action is Action.REBOOT_REQUIRED
    assert decisions[0].findings[0].recommended_action == "RESTART_BM"
    assert decisions[0].findings[0].evidence["kernel_lines"]
    assert all(d.action is Action.HOLD for d in decisions[1:])
    assert "reboot required" in decisions[-1].explanation
    assert ladder.reboot_required == "gpu_lost_reboot_required"
    assert resume(ladder).reboot_required is None


@pytest.mark.parametrize(("tag", "action"), [
    ("xid:79", "RESTART_BM"), ("xid:109", "COMPONENT_RESET"), ("xid:119", "COMPONENT_RESET"),
    ("xid:154:node_reboot_required", "RESTART_BM"),
    ("xid:154:gpu_reset_required", "COMPONENT_RESET"), ("xid:154:none", None),
    ("xid:13", None), ("xid:31", None), ("gpu_lost", "RESTART_BM"), ("oom_kill:12", None),
])
def test_issue_12_nvsentinels_action_per_kernel_event(tag: str, action: str | None) -> None:
    assert xid_action(tag) == action


def test_issue_12_every_finding_carries_a_recommended_action() -> None:
    d = decide_on(samples(0, 0, engine_state=EngineState.CRASHED, engine_crash_reason="exited"))
    assert d.findings and all(f.recommended_action == "RESTART_APP" for f in d.findings)
    assert d.findings[0].to_dict()["recommended_action"] == "RESTART_APP"


def test_issue_12_a_refused_flag_goes_to_the_first_rung_without_it() -> None:
    assert rung_without_flag(POLICY, 0, "--speculative-config") == 2
    assert rung_without_flag(POLICY, 2, "--speculative-config") is None  # not ours there
    assert rung_without_flag(POLICY, 2, "--max-num-seqs") is None        # every rung has it


@pytest.mark.parametrize(("proposed", "starting", "ready", "expected"), [
    (0, 1, False, 2),        # the start of rung 1 took the box down: rung 2
    (None, 0, False, 1),
    (3, 1, False, 3),        # already lower: stays
    (0, 1, True, 0),         # it had served: as proposed
    (0, None, None, 0),      # no run on record
    (0, 3, False, 3),        # already the last rung
])
def test_issue_12_after_an_unclean_start_the_first_start_goes_below_it(
        proposed, starting, ready, expected) -> None:
    assert rung_after_unclean_start(len(POLICY.modes), proposed, starting, ready) == expected


def test_issue_12_no_start_while_old_processes_live_or_memory_is_not_back() -> None:
    stopped = {"engine_state": EngineState.STOPPED, "engine_state_since_s": 0.0}
    d = decide_on(samples(0, 5, engine_leftover_pids=(77,), engine_leftover_stuck_pids=(),
                          **stopped))
    assert d.action is Action.HOLD and "old engine group" in d.explanation
    d = decide_on(samples(0, 5, engine_leftover_pids=(), mem_available_bytes=10 * GiB,
                          mem_available_before_launch_bytes=100 * GiB, **stopped))
    assert d.action is Action.HOLD and "memory not back" in d.explanation
    d = decide_on(samples(0, 5, engine_leftover_pids=(), mem_available_bytes=95 * GiB,
                          mem_available_before_launch_bytes=100 * GiB, **stopped))
    assert d.action is Action.START
    d = decide_on(samples(0, 5, engine_leftover_pids=(), mem_available_bytes=None,
                          mem_available_before_launch_bytes=100 * GiB, **stopped))
    assert d.action is Action.HOLD        # unknown is not "back"


@pytest.mark.parametrize(("fallbacks", "message"), [
    ([{"on": "cuda_graph_capture_oom"}], "needs args or lower_memory"),
    ([{"on": "too_hot", "lower_memory": True}], "modes[0].startup_fallbacks[0].on"),
    ([{"on": "out_of_memory", "args": {"--gpu-memory-utilization": 1.5}}],
     "--gpu-memory-utilization must be a fraction"),
])
def test_issue_12_a_bad_startup_fallback_is_refused_naming_the_field(fallbacks, message) -> None:
    from agent_supervisor.errors import PolicyError
    bad = POLICY_YAML.replace("{name: mtp2, args: {", "{name: mtp2, startup_fallbacks: "
                              + __import__("json").dumps(fallbacks) + ", args: {")
    with pytest.raises(PolicyError, match=re.escape(message)):
        load_policy(bad)


def test_issue_12_a_mode_can_turn_its_fallbacks_off() -> None:
    policy = load_policy(POLICY_YAML.replace("{name: mtp2, args: {",
                                             "{name: mtp2, startup_fallbacks: [], args: {"))
    assert policy.modes[0].fallbacks == () and len(policy.modes[1].fallbacks) == 5
    oom = ["    self.cuda_graph.capture_end()", "RuntimeError: CUDA error: out of memory"]
    d = decide_on(samples(0, 3, **STARTING) + crashed_start(4, oom), policy=policy)
    assert d.action is Action.RESTART and d.fallback is None


def test_issue_12_memory_other_processes_took_is_not_memory_the_engine_kept() -> None:
    stopped = {"engine_state": EngineState.STOPPED, "engine_state_since_s": 0.0,
               "engine_leftover_pids": (), "mem_available_before_launch_bytes": 100 * GiB,
               "mem_available_bytes": 80 * GiB, "processes_rss_before_launch_bytes": 5 * GiB}
    d = decide_on(samples(0, 200, processes_rss_bytes=20 * GiB, **stopped))
    assert d.action is Action.START          # others grew 15 GiB: 80 >= 90 - 15
    d = decide_on(samples(0, 200, processes_rss_bytes=6 * GiB, **stopped))
    assert d.action is Action.REBOOT_REQUIRED
    assert d.findings[0].evidence["other_processes_grew_bytes"] == 1 * GiB

"""Issue 29 item 1: a start failure no rung fixes is launched at most twice with the same
configuration; a poisoned compile cache is relaunched once with the caches moved aside.

Closed loop over ``decide()`` and ``advance()``: each failed start is a new run whose
crash sample carries the reporter's own line (classified as the sensors do).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_supervisor.act.compile_cache import compile_cache_dirs, move_aside
from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.ladder import LadderState, advance, resume
from agent_supervisor.policy import load_policy
from agent_supervisor.sense.engine_log import classify_engine_line
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

POLICY = load_policy("""
fleet: t
engine: {executable: vllm}
modes: [{name: mtp2}, {name: mtp1}, {name: nospec}]
restart: {restart_delay_seconds: 0, restart_delay_max_seconds: 8, start_limit_burst: 5,
          start_limit_interval_seconds: 600}
""")

#: The reporters' lines (sources: tests/fixtures/engine_log/start-failures-issue-29.txt).
LINES = {
    "engine_model_files_corrupt": "safetensors_rust.SafetensorError: Error while "
    "deserializing header: MetadataIncompleteBuffer",
    "engine_checkpoint_incompatible": "AssertionError: Attempted to load weight "
    "(torch.Size([3600])) into parameter (torch.Size([3584]))",
    "engine_driver_mismatch": "Failed to initialize NVML: Driver/library version mismatch",
    "engine_nccl_fabric": "h:946:988 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got "
    "completion with error 12, opcode 1, len 0, vendor err 129",
    "engine_compile_cache_corrupt": "RuntimeError: vLLM failed to compile the model. The most "
    "likely reason for this is that a previous compilation failed, leading to a corrupted "
    "compilation artifact.",
}
SERVER_LINE = ("RuntimeError: Engine core initialization failed. See root cause above. "
               "Failed core proc(s): {}")


def failed(t: float, run: str, line: str, rung: int = 0) -> Sample:
    lines = ("(EngineCore pid=1) Traceback (most recent call last):", line, SERVER_LINE)
    tags = tuple(dict.fromkeys(tag for ln in lines for tag in classify_engine_line(ln)))
    return Sample(t_s=t, engine_state=EngineState.CRASHED, engine_state_since_s=t,
                  engine_run_id=run, engine_rung=rung, engine_crash_reason="start_failed",
                  engine_exit_code=1, engine_was_ready=False, engine_log_lines=lines,
                  engine_log_tags=tags)


def play(line: str, starts: int) -> list:
    """``starts`` failed starts in a row, 60 s apart; the decisions taken."""
    ladder, window, out = LadderState(0), Window(3600), []
    for n in range(starts):
        t = 60.0 * (n + 1)
        window.append(failed(t, f"r{n}", line, ladder.rung))
        d = decide(window, ladder, POLICY, t)
        out.append(d)
        ladder = advance(ladder, d, POLICY, t)
        if d.action is Action.GIVE_UP:
            break
    return out


@pytest.mark.parametrize("kind", [k for k in LINES if k != "engine_compile_cache_corrupt"])
def test_issue_29_the_same_start_failure_twice_is_not_launched_a_third_time(kind: str) -> None:
    decisions = play(LINES[kind], 4)
    assert [d.action for d in decisions] == [Action.RESTART, Action.GIVE_UP]
    first, second = decisions
    assert first.findings[0].kind == kind and first.rung == 0 and not first.move_caches
    assert second.findings[0].kind == kind
    assert LINES[kind].strip() in second.explanation        # the failing line quoted
    assert "fix " in second.explanation
    assert second.findings[0].evidence["failing_lines"][0] == LINES[kind].strip()


def test_issue_29_a_poisoned_compile_cache_is_moved_aside_once_then_held() -> None:
    first, second = play(LINES["engine_compile_cache_corrupt"], 4)
    assert first.action is Action.RESTART and first.move_caches and first.rung == 0
    assert "moved aside" in first.explanation
    assert second.action is Action.GIVE_UP and not second.move_caches


def test_issue_29_an_operator_resume_gives_the_start_its_two_tries_again() -> None:
    ladder = LadderState(0, start_failures=(("model_files_corrupt", 50.0),), gave_up=True)
    assert resume(ladder).start_failures == ()


def test_issue_29_a_failure_long_ago_is_not_the_same_failure_twice() -> None:
    ladder = LadderState(0, start_failures=(("model_files_corrupt", 0.0),))
    window = Window.of([failed(700.0, "r9", LINES["engine_model_files_corrupt"])])
    assert decide(window, ladder, POLICY, 700.0).action is Action.RESTART


def test_issue_29_compile_cache_dirs_follow_the_engine_environment(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert compile_cache_dirs({}, home) == [
        home / ".cache/vllm/torch_compile_cache", home / ".triton/cache",
        home / ".cache/flashinfer"]
    env = {"VLLM_CACHE_ROOT": str(tmp_path / "v"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "i"),
           "TRITON_CACHE_DIR": str(tmp_path / "t"), "FLASHINFER_WORKSPACE_BASE": str(tmp_path)}
    assert compile_cache_dirs(env, home) == [
        tmp_path / "v/torch_compile_cache", tmp_path / "i", tmp_path / "t",
        tmp_path / ".cache/flashinfer"]


def test_issue_29_move_aside_renames_what_exists(tmp_path: Path) -> None:
    cache = tmp_path / "torch_compile_cache"
    (cache / "abc").mkdir(parents=True)
    (cache / "abc" / "artifact").write_bytes(b"\0poisoned")
    (tmp_path / "torch_compile_cache.moved-r1").mkdir()         # an earlier move
    moved = move_aside([cache, tmp_path / "absent"], "r1")
    assert moved == [(cache, tmp_path / "torch_compile_cache.moved-r1-1")]
    assert not cache.exists()
    assert (tmp_path / "torch_compile_cache.moved-r1-1/abc/artifact").read_bytes() == \
        b"\0poisoned"


def test_issue_29_an_unknown_start_failure_twice_is_not_launched_a_third_time_as_it_was() -> None:
    line = "ValueError: rope_scaling must be a dictionary with two fields, got 3 (pid 4242)"
    decisions = play(line.replace("4242", "1"), 1) + play(line, 1)   # pids differ: masked
    assert decisions[0].action is Action.RESTART
    assert decisions[0].start_signature == "ValueError: rope_scaling must be a dictionary " \
        "with two fields, got # (pid #)"
    ladder, window = LadderState(0), Window(3600)
    actions = []
    for n, pid in enumerate((11, 12)):
        t = 60.0 * (n + 1)
        window.append(failed(t, f"r{n}", line.replace("4242", str(pid))))
        d = decide(window, ladder, POLICY, t)
        actions.append(d)
        ladder = advance(ladder, d, POLICY, t)
    assert [d.action for d in actions] == [Action.RESTART, Action.STEP_DOWN]
    assert actions[1].rung == 1 and "failed twice the same way" in actions[1].explanation


def test_issue_29_different_unknown_failures_keep_the_ordinary_restarts() -> None:
    ladder, window = LadderState(0), Window(3600)
    for n in range(2):
        t = 60.0 * (n + 1)
        window.append(failed(t, f"r{n}", f"KeyError: 'layer_{'ab'[n]}'"))
        d = decide(window, ladder, POLICY, t)
        ladder = advance(ladder, d, POLICY, t)
        assert d.action is Action.RESTART, d.explanation


def test_issue_29_the_generic_server_line_is_no_signature() -> None:
    ladder = LadderState(0, start_failures=())
    window = Window.of([failed(60.0, "r0", SERVER_LINE)])
    d = decide(window, ladder, POLICY, 60.0)
    assert d.action is Action.RESTART and d.start_signature is None

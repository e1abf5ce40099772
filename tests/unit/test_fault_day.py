"""Issue 20, the day benchmark's pure parts: the seeded schedule, its fault-free
stretches, and the figures computed from what agents saw (no engine here; the harness
itself runs against the real CPU engine in tests/chaos/test_day_smoke.py)."""

from __future__ import annotations

from agent_supervisor.chaos.day_report import ArmResult, acceptance, arm_figures, format_table
from agent_supervisor.chaos.day_schedule import DAY_LADDER, Day, Fault, full_day, short_day
from agent_supervisor.load.agents import RequestRecord
from agent_supervisor.load.fleet import TaskRecord
from agent_supervisor.policy import load_policy


def test_the_same_seed_gives_the_same_schedule_and_another_seed_moves_it() -> None:
    assert full_day(7) == full_day(7)
    assert [f.at_seconds for f in full_day(7).faults] != \
        [f.at_seconds for f in full_day(8).faults]
    kinds = [f.kind for f in full_day(1).faults]
    assert kinds == ["crash", "hang", "memory", "long_prompts", "spec_crash"]
    assert [f.kind for f in short_day(1).faults] == ["spec_crash"]


def test_fault_free_stretches_end_at_the_first_persistent_fault() -> None:
    day = Day("t", 1, 100.0, (Fault("crash", 10, 20), Fault("hang", 50, 10),
                              Fault("spec_crash", 80, None)))
    assert day.fault_free() == [(0.0, 10), (30, 50), (60, 80)]
    calm = Day("t", 1, 100.0, (Fault("crash", 10, 20),))
    assert calm.fault_free() == [(0.0, 10), (30, 100.0)]


def test_the_ladder_is_a_valid_policy_fastest_first() -> None:
    policy = load_policy(f"""
fleet: day
engine: {{executable: python, port: 9}}
modes: {DAY_LADDER!r}
""".replace("'", '"'))
    assert [m.speculative for m in policy.modes] == [True, False, False]
    assert policy.modes[-1].args["--max-num-seqs"] < policy.modes[0].args["--max-num-seqs"]


def _rec(start: float, dur: float, tokens: int, ok: bool = True,
         ttft: float | None = 0.1) -> RequestRecord:
    return RequestRecord(start, ttft if ok else None, dur, tokens if ok else 0, 10, ok,
                         None if ok else "APIConnectionError: boom")


def test_figures_from_records_tasks_and_engine_spans() -> None:
    day = Day("t", 1, 100.0, (Fault("crash", 50, 20),))
    t0 = 1000.0
    # monotonic = epoch - 900
    records = [_rec(101, 2, 30), _rec(105, 1, 40, ttft=0.3), _rec(150, 2, 0, ok=False),
               _rec(180, 5, 50, ttft=0.2)]
    tasks = [TaskRecord(0, 100, 106, 2, True), TaskRecord(1, 149, 152, 1, False)]
    # engine ready 1000-1050, down until 1062, ready again; a hang from 1090 to its end.
    res = ArmResult("supervised", t0, 900.0, records, tasks,
                    intervals=[(1000.0, 1050.0), (1062.0, 1100.0)],
                    hangs=[{"start": 1090.0}], events=[])
    f = arm_figures(res, day)
    assert (f["tasks_completed"], f["tasks_failed"]) == (1, 1)
    assert (f["requests"], f["requests_failed"], f["tokens_delivered"]) == (4, 1, 120)
    # fault-free: 0-50 and 70-100 of the day; requests ending at 3, 6 and 85 s of it.
    assert f["fault_free_seconds"] == 80.0
    assert f["fault_free_tokens_per_second"] == round(120 / 80, 1)
    assert f["no_engine_serving_seconds"] == 12.0 + 10.0
    assert f["ttft_p50_seconds"] == 0.2 and f["ttft_p99_seconds"] == 0.3
    assert f["top_errors"] == [("APIConnectionError: boom", 1)]


def test_acceptance_and_table_compare_the_supervised_arm_with_both() -> None:
    base = {"tasks_completed": 10, "tasks_failed": 2, "requests": 50, "requests_failed": 3,
            "tokens_delivered": 1000, "fault_free_tokens_per_second": 20.0,
            "no_engine_serving_seconds": 30.0, "ttft_p50_seconds": 0.1,
            "ttft_p99_seconds": 0.5}
    figs = {"always-fast": base,
            "always-safe": {**base, "tasks_completed": 8, "tokens_delivered": 600,
                            "fault_free_tokens_per_second": 10.0},
            "supervised": {**base, "tasks_completed": 12, "tasks_failed": 0,
                           "tokens_delivered": 900, "fault_free_tokens_per_second": 19.0}}
    assert acceptance(figs) == {"more_tasks_than_both": True, "no_failed_task": True,
                                "fault_free_tokens_ge_0.9_fast": True,
                                "tokens_above_safe": True}
    figs["supervised"]["fault_free_tokens_per_second"] = 17.0
    assert acceptance(figs)["fault_free_tokens_ge_0.9_fast"] is False
    table = format_table(figs)
    row = next(line for line in table.splitlines() if line.startswith("tasks completed"))
    assert row.split()[-5:] == ["10", "8", "12", "1.20", "1.50"]
    failed = next(line for line in table.splitlines() if line.startswith("tasks failed"))
    assert failed.split()[-2:] == ["0.00", "0.00"]


def test_the_restart_loop_makes_tmpdirs_short_enough_for_vllm(tmp_path) -> None:
    """vLLM binds IPC sockets under TMPDIR (107-byte limit): a deep state directory (a
    pytest tmp_path) falls back to $TMPDIR, as the supervisor's own launcher does."""
    from agent_supervisor.chaos.day import overrides
    from agent_supervisor.chaos.day_arms import RestartLoop, write_policy
    from agent_supervisor.chaos.harness import chaos_policy

    deep = tmp_path / ("x" * 60) / "always-fast"
    deep.mkdir(parents=True)
    policy = write_policy(deep, chaos_policy(deep, **overrides(short_day(1), 2 << 30,
                                                               deep / "armed")))
    tmp = RestartLoop(policy, 0, deep).tmp_dir(3)
    try:
        assert len(str(tmp)) + 1 + 36 + 1 <= 107         # a vLLM socket: TMPDIR/<uuid4>
        assert tmp.is_dir() and oct(tmp.stat().st_mode & 0o777) == "0o700"
    finally:
        tmp.rmdir()

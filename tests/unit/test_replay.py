"""Replay of a trace recorded from the real CPU engine gives the live run's decisions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.replay import replay
from agent_supervisor.policy import load_policy_file
from agent_supervisor.record.trace import TraceWriter, read_trace
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from tests.unit.scenario import POLICY

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


def test_recorded_cpu_engine_trace_replays_identically() -> None:
    policy = load_policy_file(TRACES / "cpu-demo-spec-slower.policy.yaml")
    steps = replay(read_trace(TRACES / "cpu-demo-spec-slower.trace.jsonl"), policy)
    assert steps and all(st.matches for st in steps)
    acted = [(st.decision.action, policy.modes[st.decision.rung].name) for st in steps
             if st.decision.action is not Action.HOLD]
    assert acted == [(Action.START, "mtp2"), (Action.STEP_DOWN, "nospec"),
                     (Action.START, "nospec")]
    step = next(st.decision for st in steps if st.decision.action is Action.STEP_DOWN)
    assert step.findings[0].kind == "spec_slower_than_plain"


def test_a_different_policy_shows_where_it_would_differ() -> None:
    # With a stricter threshold, the same trace would not have stepped down.
    policy = load_policy_file(TRACES / "cpu-demo-spec-slower.policy.yaml")
    strict = policy.model_copy(update={"guards": policy.guards.model_copy(update={
        "speculative": policy.guards.speculative.model_copy(update={"slower_ratio": 0.1})})})
    steps = replay(read_trace(TRACES / "cpu-demo-spec-slower.trace.jsonl"), strict)
    assert any(st.matches is False for st in steps)
    assert not any(st.decision.action is Action.STEP_DOWN for st in steps)


def test_trace_round_trip_with_operator_levers(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    w = TraceWriter(path)
    w.header(fleet="t", t0_s=0.0, baselines={"nospec": [(4.0, 500.0)]})
    for t in range(5):
        w.sample(Sample(t_s=float(t), engine_state=EngineState.READY, engine_run_id="r",
                        engine_rung=0, engine_state_since_s=0.0))
    w.operator(4.5, "pin", 2)
    w.sample(Sample(t_s=5.0, engine_state=EngineState.READY, engine_run_id="r",
                    engine_rung=0, engine_state_since_s=0.0))
    w.close()
    steps = replay(read_trace(path), POLICY)
    assert [st.decision.action for st in steps][-1] is Action.STEP_DOWN
    assert "pinned by the operator" in steps[-1].decision.explanation


def test_samples_from_supervisor_sample_watch_replay_too(tmp_path: Path) -> None:
    path = tmp_path / "watch.jsonl"
    rows = [Sample(t_s=float(t), engine_state=EngineState.READY, engine_run_id="r",
                   engine_state_since_s=0.0, mem_available_bytes=1024**3).to_dict()
            for t in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    steps = replay(read_trace(path), POLICY)
    actions = [st.decision.action for st in steps]
    # The second low sample kills; the run is then handled, so once only.
    assert actions == [Action.HOLD, Action.KILL_NOW, Action.HOLD]
    assert all(st.matches is None for st in steps)


# -- issue 17: a bad trace is a clear error, a torn last line a warning --------------------

TRACE = TRACES / "cpu-demo-spec-slower.trace.jsonl"


def _replay_cli(path: Path, capsys) -> tuple[int, str]:
    from agent_supervisor.show.timeline import replay_command

    rc = replay_command(path, load_policy_file(TRACES / "cpu-demo-spec-slower.policy.yaml"),
                        as_json=True, show_all=False)
    return rc, capsys.readouterr().err


def test_issue_17_a_torn_last_line_is_skipped_with_a_warning(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.jsonl"
    lines = TRACE.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][:37])      # the writer was killed
    rc, err = _replay_cli(path, capsys)
    assert rc == 0 and f"{path}:{len(lines)}: torn last line skipped" in err


@pytest.mark.parametrize(("line", "reason"), [
    (b'{"type":"sample","t_s":"soon"}', "t_s: required, a number"),
    (b'{"type":"sample","t_s":1,"requests_running":"many"}', "requests_running: "),
    (b'{"type":"sample","t_s":1,"nonsense":1}', "nonsense: not a Sample field"),
    (b'{"type":"sample","t_s":1,"engine_state":"exploded"}', "engine_state: "),
    (b'{"type":"sample","t_s":1,"engine_rung":99}', "engine_rung 99 is not a rung"),
    (b'{"type":"sample","t_s":NaN}', "t_s: must be finite"),
    (b'{"type":"operator","t_s":1,"action":"pin"}', "rung: required"),
    (b'{"type":"operator","t_s":1,"action":"pin","rung":99}', "rung 99 is not a rung"),
    (b'{"type":"header","rung":"x"}', "rung: must be int"),
    (b'{"type":"header","baselines":{"nospec":[[1]]}}', "baselines.nospec: must be"),
    (b'{"type":"decision","rung":1}', "action: required"),
    (b'{"type":["sample"]}', "type: unknown record type"),
    (b'[1,2]', "not a JSON object"),
    (b'\xff\xfe{}', "not UTF-8"),
    (b'[' * 100_000, "not JSON"),
])
def test_issue_17_a_bad_line_is_reported_with_its_number(tmp_path: Path, capsys, line: bytes,
                                                          reason: str) -> None:
    path = tmp_path / "t.jsonl"
    lines = TRACE.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:5]) + line + b"\n" + b"".join(lines[5:]))
    rc, err = _replay_cli(path, capsys)
    assert rc == 2 and err.startswith(f"error: {path}:6: ") and reason in err, err
    assert "Traceback" not in err

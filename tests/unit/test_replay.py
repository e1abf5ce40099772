"""Replay of a trace recorded from the real CPU engine gives the live run's decisions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.replay import replay
from agent_supervisor.policy import load_policy_file
from agent_supervisor.record.trace import TraceWriter, read_trace
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.node_sample import NodeSample
from agent_supervisor.telemetry.sample import Sample
from tests.unit.scenario import POLICY, POLICY_YAML

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


# -- issue 29: a trace whose samples carry worker-node parts ------------------------------

TWO_NODES = POLICY_YAML.replace(
    "engine: {executable: vllm}",
    "engine: {executable: vllm, nodes: [{name: spark-1, address: 10.0.0.1},"
    " {name: spark-2, address: 10.0.0.2}], distributed: {agent_token_file: agent.token}}")


def _node(t: float, available_gib: float, **rank: Any) -> NodeSample:
    return NodeSample(name="spark-2", address="10.0.0.2", age_seconds=0.2, wall_s=1e9 + t,
                      mem_total_bytes=128 * 2**30, mem_available_bytes=int(available_gib * 2**30),
                      rank_run_id="r1", kernel_events=(), **{"rank_state": "running", **rank})


def test_issue_29_a_two_node_trace_the_service_wrote_replays(tmp_path: Path, capsys) -> None:
    # Written as the live service writes it (runtime/tick.py): each sample, then the
    # decision taken on it; the worker's agent kills its rank at the floor at t=20.
    from agent_supervisor.decide.decide import decide
    from agent_supervisor.decide.ladder import LadderState, advance
    from agent_supervisor.policy import load_policy
    from agent_supervisor.show.timeline import replay_command
    from agent_supervisor.telemetry.window import Window

    policy = load_policy(TWO_NODES)
    path = tmp_path / "two-nodes.trace.jsonl"
    w = TraceWriter(path)
    w.header(fleet="t", t0_s=0.0, baselines={})
    window, ladder = Window(policy.sampling.window_seconds), LadderState.initial(policy)
    for t in range(25):
        node = _node(t, 40.0) if t < 20 else _node(
            t, 1.0, rank_state="killed", rank_killed_reason="memory_floor", rank_exit_signal=9,
            rank_kill_evidence={"mem_available_bytes": [2**30, 2**30]})
        sample = Sample(t_s=float(t), engine_state=EngineState.READY, engine_run_id="r1",
                        engine_rung=0, engine_state_since_s=0.0, requests_running=1,
                        nodes=(node,))
        w.sample(sample)
        window.append(sample)
        d = decide(window, ladder, policy, float(t))
        w.decision(float(t), d)
        ladder = advance(ladder, d, policy, float(t))
    w.close()
    assert '"nodes":[{"name":"spark-2"' in path.read_text()

    rc = replay_command(path, policy, as_json=True, show_all=False)
    out, err = capsys.readouterr()
    assert (rc, err) == (0, "")           # every decision as live; no traceback
    acted = [json.loads(line) for line in out.splitlines()]
    assert [(a["action"], a["t_s"], a["matches_live"]) for a in acted] == [
        ("kill_now", 20.0, True)]
    assert acted[0]["findings"][0]["kind"] == "node_memory_floor"
    assert "spark-2" in acted[0]["explanation"]

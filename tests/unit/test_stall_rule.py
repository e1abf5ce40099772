"""The one "stalled" rule (issue 30, agent_supervisor/telemetry/stall.py): the sensors'
canary and the hung guard read the same stall from the same samples. Samples as the
sensors build them (``Sample`` fields only), a real ``Sensors`` and ``Window``."""

from __future__ import annotations

from pathlib import Path

from agent_supervisor.sense.collect import Sensors
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.stall import stall_of
from agent_supervisor.telemetry.window import Window
from tests.helpers.policies import fake_engine_policy


def run(steps: list[tuple[float, float, float, float]]) -> Window:
    """(t, running, iteration steps, prompt tokens) per sample, generation flat."""
    window = Window(600.0)
    for t, running, steps_, prompt in steps:
        window.append(Sample(t_s=t, engine_state=EngineState.READY, engine_run_id="r1",
                             requests_running=running, requests_waiting=0.0,
                             iteration_tokens_count_total=steps_,
                             prompt_tokens_total=prompt, generation_tokens_total=50.0))
    return window


def test_issue_30_a_stall_is_the_same_for_the_canary_and_the_guard(tmp_path: Path) -> None:
    sensors = Sensors(fake_engine_policy(tmp_path))          # canary_after_seconds 10
    # Requests in flight, every counter flat from t=2: stalled since 2.
    flat = run([(t, 1.0, 7.0, 100.0) for t in range(2, 14)])
    stall = stall_of(flat, 13.0, 3.0)
    assert stall is not None and (stall.since_s, stall.flat_seconds) == (2, 11)
    assert sensors._stalled(flat, 12.0) is True               # 10 s flat by now
    assert sensors._stalled(flat, 11.0) is False
    # A long prefill: no engine step, yet prompt tokens move. The guard never called
    # that a stall; the canary used to (it watched the step counter alone).
    prefill = run([(t, 1.0, 7.0, 100.0 * t) for t in range(2, 14)])
    assert stall_of(prefill, 13.0, 3.0).flat_seconds == 0
    assert sensors._stalled(prefill, 14.0) is False
    # Idle before the requests came: the stall counts from the load, for both.
    idle_then_busy = run([(t, 0.0 if t < 8 else 1.0, 7.0, 100.0) for t in range(2, 20)])
    assert stall_of(idle_then_busy, 19.0, 3.0).since_s == 8
    assert sensors._stalled(idle_then_busy, 17.0) is False
    assert sensors._stalled(idle_then_busy, 18.0) is True
    # Readings that stopped coming are unknown, not flat.
    assert stall_of(flat, 30.0, 3.0) is None

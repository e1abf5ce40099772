"""Issue 29, item 2, against real processes: the sensors send the golden canary to the
stand-in engine (tests/helpers/fake_engine.py) over HTTP, record its first answer in the
state directory, match it on the next, report a changed answer as a mismatch confirmed at
once, and record a fresh golden answer, quietly, when the engine's version changed."""

from __future__ import annotations

import json
from pathlib import Path

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.sense.golden import STORE_NAME
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window
from tests.helpers.sensors import sample_until

QUICK = {"probe_timeout_seconds": 1.0,
         "golden_canary": {"interval_seconds": 0.5, "timeout_seconds": 2.0}}


async def run_ticks(tmp_path: Path, fake_args: list[str], seconds: float,
                    until=None) -> tuple[list[Sample], object]:
    return await sample_until(tmp_path, fake_args, seconds, QUICK, until)


async def test_recorded_matched_then_a_corrupted_answer_and_an_update(tmp_path: Path) -> None:
    # The answer comes from a file the engine reads at each request: the argv (part of
    # the golden key) stays the same, as it does when a real engine starts to corrupt.
    answer = tmp_path / "answer.txt"
    args = ["--completion-text-file", str(answer)]
    # 1. A good run: its first answer becomes golden, the next one (calm, 0.5 s) matches.
    answer.write_text(" four, five, six, seven, eight, nine")
    good, policy = await run_ticks(tmp_path, args, 8.0,
                                   until=lambda s: s.golden_canary_match is True)
    notes = [s.golden_canary_note for s in good if s.golden_canary_note]
    assert notes[0].startswith("recorded a new golden answer for mode fast, engine unknown")
    assert good[-1].golden_canary_match is True and good[-1].golden_canary_mismatches == 0
    store = json.loads((policy.state_directory / STORE_NAME).read_text())
    assert [e["answer"] for e in store.values()] == [" four, five, six, seven, eight, nine"]
    # A greedy answer that parts ways late (another batch size, vLLM not batch-invariant)
    # still matches: only the first compare_chars (24) characters are compared.
    answer.write_text(" four, five, six, seven, eight, NINE!")
    late, policy = await run_ticks(tmp_path, args, 8.0,
                                   until=lambda s: s.golden_canary_match is not None)
    assert late[-1].golden_canary_match is True
    # 2. The same engine, model and mode answering something else: two mismatches in a
    #    row (the second sent at once to confirm), then the corrupted_output restart.
    answer.write_text(" xq xq !!")
    bad, policy = await run_ticks(tmp_path, args, 8.0,
                                  until=lambda s: (s.golden_canary_mismatches or 0) >= 2)
    last = bad[-1]
    assert last.golden_canary_match is False and last.golden_canary_mismatches == 2
    assert "expected ' four, five, six, seven, eight, nine', got ' xq xq !!'" in \
        last.golden_canary_note
    first_bad = next(s for s in bad if s.golden_canary_mismatches)
    assert last.t_s - first_bad.t_s < 2.0                 # confirmed at once, not 0.5 s apart
    decision = decide(Window.of(bad, 3600), LadderState(rung=0, since_s=bad[0].t_s),
                      policy, last.t_s)
    assert decision.action is Action.RESTART
    assert "corrupted_output" in {f.kind for f in decision.findings}
    # 3. The control: an engine update answers differently; a new golden answer is
    #    recorded and nothing is judged.
    updated, policy = await run_ticks(tmp_path, [*args, "--version", "0.33.0"], 2.5)
    assert all(s.golden_canary_match in (None, True) for s in updated)
    assert all(not s.golden_canary_mismatches for s in updated)
    assert any("engine 0.33.0" in (s.golden_canary_note or "") for s in updated)
    decision = decide(Window.of(updated, 3600),
                      LadderState(rung=0, since_s=updated[0].t_s), policy, updated[-1].t_s)
    assert "corrupted_output" not in {f.kind for f in decision.findings}
    assert len(json.loads((policy.state_directory / STORE_NAME).read_text())) == 2


async def test_switched_off_it_sends_nothing(tmp_path: Path) -> None:
    policy_args = ["--completion-text", "x"]
    QUICK["golden_canary"]["enabled"] = False
    try:
        samples, policy = await run_ticks(tmp_path, policy_args, 1.5)
    finally:
        QUICK["golden_canary"].pop("enabled")
    assert all(s.golden_canary_note is None for s in samples)
    assert not (policy.state_directory / STORE_NAME).exists()

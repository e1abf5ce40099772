"""Issue 29, items 2 and 4 at the pure level: the golden canary's verdict in the
``corrupted_output`` guard, its key and record (agent_supervisor/sense/golden.py), the
slots read from llama-server's recorded ``/slots`` and the stalled-slots hang, and the
record of answers past their ``max_tokens``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.findings import Response
from agent_supervisor.decide.guards import answer_overrun, corrupted_output, slots_stalled
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.policy.model import build_argv
from agent_supervisor.sense.golden import GoldenStore, files_fingerprint, golden_key
from agent_supervisor.sense.slots import slot_fields
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window
from tests.unit.scenario import POLICY, decide_on, samples

ROOT = Path(__file__).resolve().parents[2]
SLOTS = ROOT / "tests" / "fixtures" / "llamacpp" / "0.3.36" / "slots.json"


def _sit(trace: list[Sample], rung: int, handled: str | None = None) -> Situation:
    ladder = LadderState(rung=rung, since_s=0.0, handled_run_id=handled)
    return Situation(Window.of(trace, 3600), ladder, POLICY, trace[-1].t_s)


def _golden(mismatches: int | None, rung: int = 2, **over: Any) -> list[Sample]:
    return samples(0, 120, rung=rung, requests_running=1, golden_canary_match=False,
                   golden_canary_mismatches=lambda t: None if t < 100 else mismatches,
                   golden_canary_finished_s=lambda t: None if t < 100 else 100.0,
                   golden_canary_note="expected ' four, five', got 'xq!!'", **over)


# -- the golden canary's verdict ------------------------------------------------------

def test_two_mismatches_in_a_row_are_corrupted_output_restart_on_a_plain_rung() -> None:
    found = corrupted_output.check(_sit(_golden(2), rung=2))
    assert [f.kind for f in found] == ["corrupted_output"]
    assert found[0].response is Response.RESTART
    assert found[0].evidence["golden_mismatches"] == 2
    assert "xq!!" in found[0].summary and found[0].evidence["speculative"] is False


def test_on_a_speculative_rung_the_mismatch_skips_speculation() -> None:
    trace = _golden(2, rung=0)
    found = corrupted_output.check(_sit(trace, rung=0))
    assert found[0].response is Response.SKIP_SPECULATION
    decision = decide_on(trace, LadderState(rung=0, since_s=0.0))
    assert decision.action is Action.STEP_DOWN and decision.rung == 2   # nospec


def test_one_mismatch_a_recorded_answer_and_a_handled_run_are_quiet() -> None:
    assert corrupted_output.check(_sit(_golden(1), rung=2)) == []       # not confirmed
    assert corrupted_output.check(_sit(_golden(None), rung=2)) == []    # recorded/none
    assert corrupted_output.check(_sit(_golden(2), rung=2, handled="r1")) == []
    quiet = samples(0, 120, rung=2, requests_running=1, golden_canary_match=True,
                    golden_canary_mismatches=0, golden_canary_finished_s=60.0)
    assert decide_on(quiet, LadderState(rung=2, since_s=0.0)).action is Action.HOLD


# -- the key and the record ------------------------------------------------------------

def test_the_key_follows_the_rung_the_engine_version_and_the_request() -> None:
    base, about = golden_key(POLICY, 0, "m", "0.32.0", "f")
    assert golden_key(POLICY, 0, "m", "0.32.0", "f")[0] == base          # stable
    assert about["mode"] == "mtp2" and about["engine_version"] == "0.32.0"
    others = {golden_key(POLICY, 2, "m", "0.32.0", "f")[0],               # another rung
              golden_key(POLICY, 0, "m", "0.33.0", "f")[0],               # an update
              golden_key(POLICY, 0, "m", None, "f")[0],                   # unknown version
              golden_key(POLICY, 0, "m", "0.32.0", "g")[0],               # new weights
              golden_key(POLICY, 0, "other", "0.32.0", "f")[0]}
    assert base not in others and len(others) == 5
    changed = POLICY.model_copy(update={"sampling": POLICY.sampling.model_copy(update={
        "golden_canary": POLICY.sampling.golden_canary.model_copy(update={"max_tokens": 8})})})
    assert golden_key(changed, 0, "m", "0.32.0", "f")[0] != base


def test_the_store_records_and_reads_back_and_survives_a_bad_file(tmp_path: Path) -> None:
    store = GoldenStore(tmp_path / "state" / "golden_canary.json")
    assert store.answer("k") is None
    store.record("k", " four, five", {"mode": "nospec"})
    store.record("j", "x", {"mode": "mtp2"})
    assert store.answer("k") == " four, five" and store.answer("j") == "x"
    assert json.loads(store.path.read_text())["k"]["mode"] == "nospec"
    store.path.write_text("{not json")
    assert store.answer("k") is None and store.read() == {}


def test_the_fingerprint_changes_when_weights_are_replaced(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"a" * 100)
    argv = ["vllm", "--model", str(model), "--port", "8000"]
    first = files_fingerprint(argv)
    assert files_fingerprint(argv) == first
    assert files_fingerprint([*argv[:2], f"--model={model}"]) == first     # flag=value
    (model / "model.safetensors").write_bytes(b"b" * 101)
    assert files_fingerprint(argv) != first
    assert files_fingerprint(["vllm", "--model", "org/hub-id"]) == files_fingerprint(["x"])
    other = tmp_path / "answer.txt"                   # not weights: not in the key
    other.write_text("a")
    with_other = files_fingerprint([*argv, "--chat-template", str(other)])
    other.write_text("bb")
    assert files_fingerprint([*argv, "--chat-template", str(other)]) == with_other
    gguf = tmp_path / "draft.gguf"                    # a weights file named alone
    gguf.write_bytes(b"g")
    before = files_fingerprint(["llama-server", "-md", str(gguf)])
    gguf.write_bytes(b"gg")
    assert files_fingerprint(["llama-server", "-md", str(gguf)]) != before


def test_the_launch_digest_covers_the_speculative_config() -> None:
    assert build_argv(POLICY, POLICY.modes[0]) != build_argv(POLICY, POLICY.modes[1])
    assert golden_key(POLICY, 0, "m", "v", "f")[1]["launch"] != \
        golden_key(POLICY, 1, "m", "v", "f")[1]["launch"]


# -- llama-server's slots ---------------------------------------------------------------

def test_the_recorded_slots_read_four_slots_none_processing() -> None:
    text = SLOTS.read_text()
    assert slot_fields(text) == {"engine_slots_total": 4, "engine_slots_processing": 0}
    slots = json.loads(text)
    slots[3]["is_processing"] = True
    assert slot_fields(json.dumps(slots)) == {"engine_slots_total": 4,
                                              "engine_slots_processing": 1}


def test_slots_of_another_shape_are_unknown() -> None:
    for text in (None, "", "{", "[]", '{"error": "slots endpoint is disabled"}',
                 '[{"id": 0, "state": 0}]', '[{"id": 0, "is_processing": 1}]'):
        assert slot_fields(text) == {}, text


def _slots(processing: Any, in_flight: Any, t1: float = 200) -> list[Sample]:
    return samples(0, t1, rung=2, engine_slots_total=1, engine_slots_processing=processing,
                   gateway_requests_in_flight=in_flight, health_status=200,
                   engine_loop_answered=True, requests_running=0, requests_waiting=0)


def test_a_request_held_while_no_slot_processes_is_a_hang() -> None:
    stall = POLICY.guards.engine_hung.stall_seconds                       # 60
    trace = _slots(0, lambda t: 1 if t >= 100 else 0)
    held_at = [x.t_s for x in trace if slots_stalled.check(_sit(
        [y for y in trace if y.t_s <= x.t_s], rung=2))]
    assert held_at and held_at[0] == 100 + stall
    found = slots_stalled.check(_sit(trace, rung=2))[0]
    assert found.kind == "engine_hung" and found.response is Response.RESTART
    assert found.evidence["engine_slots_total"] == 1
    assert decide_on(trace, LadderState(rung=2, since_s=0.0)).action is Action.RESTART


def test_a_busy_slot_an_idle_gateway_and_unread_slots_are_quiet() -> None:
    assert slots_stalled.check(_sit(_slots(1, 1), rung=2)) == []          # long prefill
    assert slots_stalled.check(_sit(_slots(0, 0), rung=2)) == []          # idle
    unread = _slots(lambda t: None if 140 <= t <= 150 else 0, 1)          # /slots unread
    assert slots_stalled.check(_sit(unread, rung=2)) == []
    blip = _slots(lambda t: 1 if t % 30 == 0 else 0, 1)                   # scheduled
    assert slots_stalled.check(_sit(blip, rung=2)) == []


# -- answers past their max_tokens ------------------------------------------------------

def test_answers_past_max_tokens_are_recorded_never_a_restart() -> None:
    trace = samples(0, 120, rung=2, requests_running=2,
                    gateway_overrun_answers_total=lambda t: 0 if t < 100 else 1)
    found = answer_overrun.check(_sit(trace, rung=2))
    assert [(f.kind, f.response) for f in found] == [("answer_past_max_tokens",
                                                      Response.RECORD)]
    assert decide_on(trace, LadderState(rung=2, since_s=0.0)).action is Action.HOLD
    steady = samples(0, 120, rung=2, gateway_overrun_answers_total=3)
    assert answer_overrun.check(_sit(steady, rung=2)) == []


def test_state_file_is_replaced_atomically(tmp_path: Path) -> None:
    store = GoldenStore(tmp_path / "golden_canary.json")
    store.record("k", "a", {})
    inode = os.stat(store.path).st_ino
    store.record("k", "b", {})
    assert os.stat(store.path).st_ino != inode and store.answer("k") == "b"
    assert not store.path.with_suffix(".tmp").exists()

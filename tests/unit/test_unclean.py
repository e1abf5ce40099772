"""Unclean stops and host resets: the pure verdict, then a real SQLite store where the
previous life ran on another boot with its engine running."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_supervisor.record.records import AddRun, UpdateRun
from agent_supervisor.record.service_runs import (
    heartbeat_service_run,
    previous_service_run,
    service_runs,
    start_service_run,
    stop_service_run,
)
from agent_supervisor.record.store import Store
from agent_supervisor.record.unclean import (
    assess_previous_life,
    check_previous_life,
    read_boot_id,
)

MODES = ["mtp5", "mtp2", "nospec", "safe"]
T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)


@dataclass
class Life:
    service_run_id: str = "s-prev"
    pid: int = 4242
    boot_id: str | None = "boot-a"
    started_at: datetime = T0
    heartbeat_at: datetime | None = T0 + timedelta(minutes=5)
    stopped_at: datetime | None = None
    policy_path: str | None = "/etc/supervisor/fleet.yaml"


@dataclass
class Run:
    run_id: str = "r1"
    mode: str = "mtp2"
    rung: int = 1
    ended_at: datetime | None = None
    ready_at: datetime | None = T0          # it had served


def verdict(previous=None, boot_id="boot-b", last_run=None, setting="one_rung_down"):
    return assess_previous_life(previous=previous, boot_id=boot_id, last_run=last_run,
                                modes=MODES, after_host_reset=setting, now=NOW)


def test_first_start_and_clean_stop_say_nothing() -> None:
    assert verdict().kind is None and verdict().record is None
    clean = verdict(Life(stopped_at=T0 + timedelta(minutes=9)), last_run=Run())
    assert (clean.kind, clean.start_rung, clean.record) == (None, None, None)


def test_same_boot_is_an_unclean_stop() -> None:
    v = verdict(Life(), boot_id="boot-a", last_run=Run())
    assert (v.kind, v.start_rung) == ("unclean_stop", None)
    inc = v.record.incident
    assert (inc.severity, inc.action) == ("warning", "none")
    assert v.record.transition is None
    assert (inc.started_at, inc.ended_at) == (T0 + timedelta(minutes=5), NOW)
    assert inc.findings[0]["evidence"]["pid"] == 4242
    assert inc.run_id == "r1"                       # the engine run left open


def test_unknown_boot_id_cannot_tell_a_reset() -> None:
    assert verdict(Life(), boot_id=None, last_run=Run()).kind == "unclean_stop"
    assert verdict(Life(boot_id=None), last_run=Run()).kind == "unclean_stop"


def test_host_reset_with_the_engine_running_steps_down_one_rung() -> None:
    v = verdict(Life(), last_run=Run())
    assert (v.kind, v.start_rung) == ("host_reset", 2)
    inc, tr = v.record.incident, v.record.transition
    assert (inc.severity, inc.action, inc.mode) == ("critical", "step_down", "mtp2")
    assert (tr.from_mode, tr.to_mode, tr.from_rung, tr.to_rung, tr.actor) == (
        "mtp2", "nospec", 1, 2, "startup")
    ev = inc.findings[0]["evidence"]
    assert (ev["previous_boot_id"], ev["boot_id"], ev["engine_run_open"]) == (
        "boot-a", "boot-b", True)
    assert "starting in nospec" in v.explanation


def test_host_reset_settings() -> None:
    assert verdict(Life(), last_run=Run(), setting="same_rung").start_rung == 1
    assert verdict(Life(), last_run=Run(), setting="same_rung").record.transition is None
    assert verdict(Life(), last_run=Run(), setting="initial").start_rung is None
    at_bottom = verdict(Life(), last_run=Run(mode="safe", rung=3))
    assert (at_bottom.start_rung, at_bottom.record.transition) == (3, None)
    renamed = verdict(Life(), last_run=Run(mode="gone", rung=1))   # found by stored rung
    assert renamed.start_rung == 2
    with pytest.raises(ValueError):
        verdict(Life(), last_run=Run(), setting="two_rungs_down")


def test_host_reset_without_a_running_engine_is_a_warning_and_no_step() -> None:
    v = verdict(Life(), last_run=Run(ended_at=T0 + timedelta(minutes=1)))
    assert (v.kind, v.record.incident.severity, v.start_rung) == ("host_reset", "warning",
                                                                  None)
    assert v.record.incident.run_id is None


def test_the_incident_key_is_the_same_for_the_same_previous_life() -> None:
    assert verdict(Life(), last_run=Run()).record.key == verdict(Life(), last_run=Run()).record.key
    assert verdict(Life(), last_run=Run()).record.key != \
        verdict(Life(service_run_id="other"), last_run=Run()).record.key


def test_read_boot_id(tmp_path: Path) -> None:
    (tmp_path / "boot_id").write_text("3f1c2a9e-0000-4000-8000-000000000001\n")
    assert read_boot_id(tmp_path / "boot_id") == "3f1c2a9e-0000-4000-8000-000000000001"
    assert read_boot_id(tmp_path / "missing") is None
    real = read_boot_id()
    assert real is None or len(real) == 36


def test_host_reset_on_a_real_store_records_and_steps_down(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/s.db", fleet="f", host="h")
    # The previous life: boot A, an engine in mtp2 (rung 1), then the host went down.
    prev = start_service_run(store=store, boot_id="boot-a", started_at=T0, pid=4242,
                             policy_path="/p.yaml", version="0.1.0")
    heartbeat_service_run(store=store, service_run_id=prev.service_run_id,
                          at=T0 + timedelta(minutes=5))
    store.apply(AddRun(run_id="r0", mode="mtp5", rung=0, argv=["vllm"], pid=1, port=8000,
                       log_path="/l", started_at=T0))
    store.apply(UpdateRun(run_id="r0", values={"ended_at": T0 + timedelta(minutes=1),
                                               "outcome": "crashed"}))
    store.apply(AddRun(run_id="r1", mode="mtp2", rung=1, argv=["vllm"], pid=2, port=8000,
                       log_path="/l", started_at=T0 + timedelta(minutes=2)))
    # This life, on boot B.
    v = check_previous_life(store=store, boot_id="boot-b", modes=MODES,
                            after_host_reset="one_rung_down", now=NOW)
    assert (v.kind, v.start_rung) == ("host_reset", 2)
    assert store.apply(v.record) is True
    again = check_previous_life(store=store, boot_id="boot-b", modes=MODES,
                                after_host_reset="one_rung_down", now=NOW)
    assert store.apply(again.record) is False       # a retried start reports it once
    (inc,) = store.incidents()
    assert (inc.kind, inc.severity, inc.run_id, inc.mode) == ("host_reset", "critical", "r1",
                                                              "mtp2")
    assert (inc.started_at, inc.ended_at) == (T0 + timedelta(minutes=5), NOW)
    (tr,) = store.transitions()
    assert (tr.from_mode, tr.to_mode, tr.actor, tr.incident_id) == ("mtp2", "nospec",
                                                                    "startup", inc.id)
    # This life starts, is the newest, and stops cleanly: the next start sees no trouble.
    me = start_service_run(store=store, boot_id="boot-b", started_at=NOW)
    assert previous_service_run(store=store, exclude_service_run_id=me.service_run_id) \
        .service_run_id == prev.service_run_id
    stop_service_run(store=store, service_run_id=me.service_run_id,
                     at=NOW + timedelta(hours=1), exit_code=0)
    later = check_previous_life(store=store, boot_id="boot-b", modes=MODES,
                                after_host_reset="one_rung_down", now=NOW + timedelta(hours=2))
    assert later.kind is None
    lives = service_runs(store=store)
    assert [(r.boot_id, r.stopped_at is not None, r.exit_code) for r in lives] == [
        ("boot-b", True, 0), ("boot-a", False, None)]
    store.close()


def test_issue_12_a_life_that_ended_while_the_engine_was_starting_starts_below_it() -> None:
    starting = Run(ready_at=None)
    v = verdict(Life(), last_run=starting, setting="same_rung")     # a host reset
    assert (v.kind, v.start_rung) == ("host_reset", 2)
    assert v.record.transition.to_mode == "nospec"
    assert v.record.incident.findings[0]["evidence"]["engine_was_starting"] is True
    assert "below the rung that was starting" in v.explanation
    v = verdict(Life(), boot_id="boot-a", last_run=starting)          # an unclean stop
    assert (v.kind, v.start_rung, v.record.incident.severity) == ("unclean_stop", 2, "critical")
    assert verdict(Life(), boot_id="boot-a", last_run=Run()).start_rung is None  # it served

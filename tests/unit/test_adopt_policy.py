"""Issue 31 item 1, adoption's pure parts: the ``engine.adopt`` section refused with the
field named, the engine's URL filled from it; an operator's lever carried out while
advising (``act/advice.carried_out``); and which decisions an adopted engine cannot have
(``AdoptingLauncher.cannot_carry_out``, read by the executor's gate and recorded with the
reason). The whole service with real processes: tests/process/test_adopt.py."""

from __future__ import annotations

import pytest
import yaml

from agent_supervisor.act.adopt import AdoptingLauncher
from agent_supervisor.act.advice import carried_out
from agent_supervisor.act.effects import Executor
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.errors import PolicyError
from agent_supervisor.policy import load_policy
from tests.helpers.fakes import FakeEngine, FakeGateway, FakeRecorder
from tests.helpers.policies import fake_engine_policy


def policy_with(adopt: dict, **engine):
    data = {"fleet": "t", "engine": {"executable": "vllm", **engine, "adopt": adopt},
            "modes": [{"name": "fast"}, {"name": "safe"}]}
    return load_policy(yaml.safe_dump(data), source="p.yaml")


@pytest.mark.parametrize(("adopt", "engine", "message"), [
    ({}, {}, "engine.adopt: give exactly one selector of pid_file, cmdline, port, container, "
             "container_label (given: none)"),
    ({"cmdline": "vllm", "port": 8000}, {}, "(given: cmdline, port)"),
    ({"cmdline": "vllm ("}, {}, "engine.adopt.cmdline: not a regular expression"),
    ({"port": 8123}, {"port": 9000},
     "engine.port is 9000 but engine.adopt.port says 8123: set one of them"),
    ({"pid_file": "x", "base_url": "http://h:1/v1"}, {},
     "engine.adopt.base_url: 'http://h:1/v1': http://HOST:PORT with no path"),
    ({"container": "vllm", "take_over": True}, {}, "take_over: an adopted container"),
    ({"container": "vllm", "log_file": "/x"}, {}, "log_file: a container's log"),
    ({"container_label": "a b"}, {}, "engine.adopt.container_label: 'a b': a label is"),
    ({"port": 0}, {}, "engine.adopt.port"),
    ({"cmdline": "vllm", "find_interval_seconds": 0}, {}, "find_interval_seconds"),
])
def test_issue_31_a_bad_adopt_section_is_refused_naming_the_field(
        adopt: dict, engine: dict, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        policy_with(adopt, **engine)
    assert "p.yaml" in str(err.value) and message in str(err.value)


def test_issue_31_the_adopted_engines_url_comes_from_the_selector_or_base_url() -> None:
    p = policy_with({"port": 8123})
    assert (p.engine.host, p.engine.port) == ("127.0.0.1", 8123)
    p = policy_with({"pid_file": "/run/v.pid", "base_url": "http://10.0.0.2:8100"})
    assert (p.engine.host, p.engine.port) == ("10.0.0.2", 8100)
    p = policy_with({"cmdline": r"vllm serve .*--port 8000\b"})
    assert p.engine.adopt is not None and not p.engine.adopt.is_container
    assert p.engine.adopt.selector == r"cmdline 'vllm serve .*--port 8000\\b'"
    assert policy_with({"container_label": "app=vllm"}).engine.adopt.is_container


@pytest.mark.parametrize("action", [Action.STEP_DOWN, Action.STEP_UP, Action.RELOAD])
def test_issue_31_an_operators_lever_acts_while_advising(action: Action) -> None:
    lever = Decision(action, 1, "moved by the operator to safe", operator=True)
    assert carried_out(lever, advising=True, launched=True)
    guard = Decision(action, 1, "warning: step down")
    assert not carried_out(guard, advising=True, launched=True)
    # The START that completes the lever (the engine stopped on purpose): not launched.
    assert carried_out(Decision(Action.START, 1, "start safe"), advising=True,
                       launched=False)


def adopted_launcher(tmp_path, **adopt) -> AdoptingLauncher:
    policy = fake_engine_policy(tmp_path, engine={"adopt": adopt})
    launcher = AdoptingLauncher(policy)
    launcher.adopted = True
    return launcher


@pytest.mark.parametrize(("adopt", "action", "rung", "refused"), [
    ({"cmdline": "x"}, Action.STEP_DOWN, 1, "engine.adopt.take_over is false"),
    ({"cmdline": "x"}, Action.RELOAD, 0, "engine.adopt.take_over is false"),
    ({"cmdline": "x"}, Action.RESTART, 0, None),          # a stop: it can do that
    ({"cmdline": "x"}, Action.KILL_NOW, 1, None),
    ({"cmdline": "x", "take_over": True}, Action.STEP_DOWN, 1, None),
    ({"container": "v"}, Action.STEP_DOWN, 1, "restarts it only as itself"),
    ({"container": "v"}, Action.RELOAD, 0, None),         # restarted as itself
])
def test_issue_31_what_an_adopted_engine_cannot_have(tmp_path, adopt, action, rung,
                                                        refused) -> None:
    launcher = adopted_launcher(tmp_path, **adopt)
    why = launcher.cannot_carry_out(Decision(action, rung, "x"))
    assert why is None if refused is None else refused in why


async def test_issue_31_the_executor_advises_what_the_adopted_engine_cannot_have(
        tmp_path) -> None:
    policy = fake_engine_policy(tmp_path, engine={"adopt": {"pid_file": "e.pid"}})
    launcher = AdoptingLauncher(policy)
    launcher.adopted = True
    recorder, engine = FakeRecorder(), FakeEngine()
    executor = Executor(policy, engine, recorder, poke_at=lambda _: None,
                        give_up=lambda: None, gateway=FakeGateway())
    executor.launcher = launcher           # the gate reads its owner's cannot_carry_out
    step = Decision(Action.STEP_DOWN, 1, "preemption storm -> step down to safe")
    assert executor.advisory(step)
    await executor.carry_out(step, from_rung=0)
    (inc, transition, _), = recorder.incidents
    assert inc.action == "would_step_down" and transition is None
    assert inc.explanation == ("not done (the adopted engine (found by pid_file 'e.pid') "
                               "cannot be relaunched by the supervisor: engine.adopt."
                               "take_over is false): preemption storm -> step down to safe")


def test_issue_31_status_text_says_what_was_adopted_or_why_it_waits() -> None:
    from agent_supervisor.commands.levers import status_text
    from tests.helpers.commands import _status

    assert "ADOPTED" not in status_text(_status(None))
    waiting = {"selector": "cmdline 'vllm serve'", "state": "waiting for the engine to adopt",
               "waiting": "2 processes matching cmdline 'vllm serve' (pids 10, 20): narrow "
                          "the selector to one", "pid": None, "log": None}
    assert ("ADOPTED ENGINE (cmdline 'vllm serve'): waiting for the engine to adopt: 2 "
            "processes matching") in status_text({**_status(None), "adopt": waiting})
    found = {**waiting, "waiting": None, "state": "adopted", "pid": 10}
    assert "ADOPTED ENGINE (cmdline 'vllm serve'): adopted, log: none" in status_text(
        {**_status(None), "adopt": found})

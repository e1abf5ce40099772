"""Issue 15 on the real llama-server (llama.cpp vendored by llama-cpp-python 0.3.36, built by
``supervisor engine-env --kind llama_cpp``), under an agent fleet through the gateway.

One supervisor life (``policies/cpu-demo-llamacpp.yaml``'s ladder: draft4 -> ngram ->
nospec -> safe) goes through the failure modes in order, each leaving the engine serving:

1. the server killed (SIGKILL) -> restart of the same rung;
2. the server's main thread frozen (cgroup v1 freezer on that thread alone) -> decoding
   stops while /health (and here /slots, /metrics) answer, the canary times out -> hang
   verdict; a hang is SIGKILLed at once (no SIGTERM);
3. the whole process SIGSTOPped -> /slots unanswered (``engine_loop_answered`` False),
   /health too -> hang verdict;
4. a planned stop (step down) of a server that cannot act on SIGTERM (SIGSTOPped, the
   signal pending) -> SIGKILL after stop_grace_seconds, ``sigterm_ignored`` recorded;
5. a GGML_ASSERT abort in the n-gram rung -> the first rung without speculation.
   Scripted: the test appends the assert line of a field report (spiritbuun/buun-llama-cpp
   #74) to the run's log (where the server's stderr goes, O_APPEND) and sends the real
   server SIGABRT, which is what ggml_abort() does after printing it;
6. the memory floor: a balloon takes MemAvailable under the floor -> kill now.

A start with a flag the binary does not know ends after one attempt, the flag named.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.chaos import scenarios
from agent_supervisor.chaos.harness import ROOT, Rig
from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.policy import load_policy
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.window import Window
from tests.helpers.freezer import Freezer

LLAMACPP = ROOT / ".llamacpp"
SERVER = LLAMACPP / "bin" / "llama-server"
GiB = 1024**3
#: The field report's line (spiritbuun/buun-llama-cpp#74), verbatim.
ASSERT_LINE = ('common/sampling.cpp:635: GGML_ASSERT(idxs.size() == draft.size() + 1 && '
               '"idxs.size() must be draft.size() + 1") failed')


def llama_overrides(state: Path, **more: object) -> dict:
    """The chaos rig's policy turned into the llama-server demo ladder."""
    avail = psutil.virtual_memory().available
    data: dict = {
        "engine": {"kind": "llama_cpp", "executable": ".llamacpp/bin/llama-server",
                   "args": ["--model", ".llamacpp/models/target-f16.gguf",
                            "--alias", "tiny-agent"],
                   "environment": {}, "start_timeout_seconds": 60,
                   "shutdown_timeout_seconds": 0, "stop_grace_seconds": 3,
                   "kill_timeout_seconds": 10},
        "modes": [
            {"name": "draft4", "args": {"--spec-type": "draft-simple",
                                        "--model-draft": ".llamacpp/models/draft-f16.gguf",
                                        "--spec-draft-n-max": 4, "--parallel": 4,
                                        "--ctx-size": 4096},
             "gateway": {"max_concurrency": 8, "max_queue": 64}},
            {"name": "ngram", "args": {"--spec-type": "ngram-simple", "--spec-draft-n-max": 4,
                                       "--parallel": 4, "--ctx-size": 4096}},
            {"name": "nospec", "args": {"--parallel": 4, "--ctx-size": 4096}},
            {"name": "safe", "args": {"--parallel": 2, "--ctx-size": 1024}}],
        "guards": {"engine_hung": {"stall_seconds": 10, "ready_grace_seconds": 3,
                                   "suspect_seconds": 5},
                   # A floor 2.5 GiB under what is free now: the balloon crosses it without
                   # starving the other engines of a shared box.
                   # The start after the kill waits for floor + margin: 256 MiB, as what is
                   # free on a shared box drifts by a GiB or more over the module.
                   "memory_floor": {"min_available_bytes": int(max(2 * GiB, avail - 2.5 * GiB)),
                                    "start_margin_bytes": 256 * 2**20}},
        "sampling": {"tick_seconds": 1, "canary_after_seconds": 3, "canary_timeout_seconds": 4},
    }
    data.update(more)
    return data


@pytest.fixture(autouse=True)
def _llama_built() -> None:
    if not SERVER.exists() or not (LLAMACPP / "models" / "draft-f16.gguf").exists():
        pytest.fail("llama-server or its GGUF models are missing: run `make setup` "
                    "(supervisor engine-env --kind llama_cpp)")


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    os.environ.setdefault("SUPERVISOR_ADMIN_TOKEN", secrets.token_hex(8))
    state = tmp_path_factory.mktemp("llamacpp")
    r = Rig(state, **llama_overrides(state))
    r.start()
    r.ready_run()
    r.start_fleet(sessions=4)
    yield r
    r.close()


def _runs_after(rig: Rig, t0: float) -> list:
    return [r for r in rig.runs() if r.started_at.timestamp() >= t0 - 0.5]


def test_llamacpp_1_killed_server_restarts(rig: Rig) -> None:
    res = scenarios.crash_scenario("llama-server SIGKILL", lambda pid: os.kill(
        pid, signal.SIGKILL), ("exited",), "one process, no children")(rig)
    print(f"\nkilled: {res}")
    assert res.incident == "exited" and res.extra["old_group_gone"]
    assert res.extra["restart_begun_seconds"] <= 1.0
    assert rig.runs()[-1].mode == "draft4"


def _escalations(rig: Rig) -> int:
    """The launcher's 'still running ... after SIGTERM (sigterm ignored)' lines so far."""
    return (rig.state / "supervisor.log").read_text(errors="replace").count("(sigterm ignored)")


def _wedge(rig: Rig, inject, release) -> tuple:
    """Inject a wedge under the fleet; wait for the hang verdict, release, see it serve."""
    time.sleep(1.0)                     # an earlier scenario's incident is older than t0
    run = [r for r in rig.runs() if r.ready_at is not None][-1]
    time.sleep(max(0.0, 4 - (time.time() - run.ready_at.timestamp())))
    pid = rig.engine_pid()
    t0 = time.time()
    inject(pid)
    try:
        inc = scenarios._incident(rig, ("engine_hung",), t0)
    finally:
        # A hang is SIGKILLed at once (no SIGTERM); a frozen thread holds the exit until
        # thawed (it reads as state D, which the supervisor takes for a driver hang).
        release(pid)
    new = rig.ready_run(after=t0)
    return inc, new, t0


@pytest.mark.skipif(not Freezer.available(), reason="needs root and a cgroup v1 freezer")
def test_llamacpp_2_frozen_main_thread_is_a_hang_with_health_ok(rig: Rig) -> None:
    freezer = Freezer()
    # cgroup v1's tasks file takes a thread id: only the main thread (tid = pid) is frozen;
    # the HTTP threads run on.
    inc, new, t0 = _wedge(rig, freezer.freeze, lambda pid: freezer.remove())
    evidence = next(f["evidence"] for f in inc.findings if f["kind"] == "engine_hung")
    print(f"\nfrozen loop: verdict after {inc.started_at.timestamp() - t0:.1f} s, {evidence}")
    # Seen on 0.3.36: decoding stops, while /health and also /slots and /metrics answer
    # (the frozen main thread is not the one that serves the task queue here): the
    # verdict rests on the flat counters and the failed canary, as for vLLM.
    assert evidence["health_status"] == 200
    assert evidence["canary_ok"] is False
    assert evidence["flat_seconds"] >= evidence["stall_seconds"]
    assert new.ready_at is not None and new.mode == "draft4"


def test_llamacpp_3_sigstopped_server_is_a_hang(rig: Rig) -> None:
    inc, new, t0 = _wedge(rig, lambda pid: os.kill(pid, signal.SIGSTOP), lambda pid: None)
    evidence = next(f["evidence"] for f in inc.findings if f["kind"] == "engine_hung")
    print(f"\nSIGSTOP: verdict after {inc.started_at.timestamp() - t0:.1f} s, {evidence}")
    assert evidence["engine_loop_answered"] is False and evidence["canary_ok"] is False
    assert evidence["health_status"] is None           # a stopped process answers nothing
    assert new.ready_at is not None


def test_llamacpp_4_sigterm_ignored_escalates_to_sigkill(rig: Rig) -> None:
    """A planned stop (the operator's step down) of a server that cannot act on SIGTERM
    (SIGSTOPped: the signal stays pending) -> SIGKILL after stop_grace_seconds, recorded."""
    rig.stop_fleet()                 # nothing in flight: the gateway's drain ends at once
    run = [r for r in rig.runs() if r.ready_at is not None][-1]
    escalations = _escalations(rig)
    t0 = time.time()
    os.kill(run.pid, signal.SIGSTOP)
    rig.action("step-down")
    rig.wait("SIGKILL escalation", lambda: _escalations(rig) > escalations)
    # The stopped run itself may have started inside ready_run's 0.5 s of slack (test 3's
    # successor, ready 0.1-0.7 s after its spawn): it is not the new run (CI failure:
    # "draft4 -> draft4", the stopped run read back as its own successor).
    new = rig.ready_run(after=t0, besides=run.run_id)
    rig.start_fleet(sessions=4)
    old = next(r for r in rig.runs() if r.run_id == run.run_id)
    print(f"\nSIGTERM ignored: {old.mode} -> {new.mode}, sigterm_ignored {old.sigterm_ignored}")
    assert old.sigterm_ignored is True and old.planned_stop is True
    assert new.mode == "ngram" and Rig.group_gone(run.pid)


def test_llamacpp_5_ggml_assert_with_speculation_steps_to_no_speculation(rig: Rig) -> None:
    run = [r for r in rig.runs() if r.ready_at is not None][-1]
    assert run.mode == "ngram"              # speculative (n-gram), after the step down
    t0 = time.time()
    with open(run.log_path, "a") as log:
        log.write(ASSERT_LINE + "\n")
    time.sleep(1.5)                          # the tail reads it at the next tick
    os.kill(run.pid, signal.SIGABRT)
    inc = scenarios._incident(rig, ("exited",), t0)
    new = rig.ready_run(after=t0, besides=run.run_id)
    print(f"\nassert: {inc.kind} -> {inc.action}, new run {new.mode}: {inc.explanation}")
    assert new.mode == "nospec", inc.explanation
    assert inc.findings[0]["evidence"]["speculative_signatures"] == ["ggml_assert"]
    assert inc.findings[0]["evidence"]["exit_signal"] == signal.SIGABRT


def test_llamacpp_6_memory_floor_kills_the_server(rig: Rig) -> None:
    res = scenarios.memory_floor(rig)
    print(f"\nmemory floor: {res}")
    assert res.incident == "memory_floor" and res.action == "kill_now"
    assert res.extra.get("group_gone_after_decision_seconds", 0) <= 1.0


def test_llamacpp_bad_flag_ends_after_one_attempt_with_the_flag_named(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load((ROOT / "policies" / "cpu-demo-llamacpp.yaml").read_text())
    data["engine"]["working_directory"] = str(ROOT)
    data["engine"]["args"] += ["--bogus-flag", "3"]
    data["storage"] = {"state_directory": str(tmp_path / "state")}
    from tests.helpers.ports import free_port
    data["engine"]["port"] = free_port()
    policy = load_policy(yaml.safe_dump(data), base_dir=ROOT / "policies")

    async def go() -> None:
        launcher, sensors = EngineLauncher(policy), Sensors(policy)
        await sensors.start()
        run = await launcher.start(rung=2)
        try:
            deadline = time.monotonic() + 60
            while launcher.state is EngineState.STARTING:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert launcher.state is EngineState.CRASHED
            await asyncio.sleep(0.2)
            window = Window(600)
            sample = await sensors.sample(now_s=time.monotonic(), status=launcher.status(),
                                          window=window, leftovers=launcher.leftovers(),
                                          log_lines=run.log_tail.poll() if run.log_tail else [])
            window.append(sample)
            assert "bad_argument:--bogus-flag" in sample.engine_log_tags
            d = decide(window, LadderState(rung=2), policy, sample.t_s)
            assert d.action is Action.GIVE_UP and "--bogus-flag" in d.explanation
        finally:
            await launcher.kill(reason="clear")
            await sensors.close()
            await launcher.close()

    asyncio.run(go())

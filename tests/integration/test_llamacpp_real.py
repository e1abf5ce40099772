"""Issue 15 on the real llama-server (llama.cpp vendored by llama-cpp-python 0.3.36, built by
``supervisor engine-env --kind llama_cpp``), under an agent fleet through the gateway.

One supervisor life (``policies/cpu-demo-llamacpp.yaml``'s ladder: draft4 -> ngram ->
nospec -> safe) goes through the failure modes in order, each leaving the engine serving:

1. the server killed (SIGKILL) -> restart of the same rung;
2. the server's main thread frozen (cgroup v1 freezer on that thread alone) -> decoding
   stops while /health (and here /slots, /metrics) answer, the canary times out -> hang
   verdict; a hang is SIGKILLed at once (no SIGTERM).

The SIGSTOP wedge (/slots unanswered), SIGTERM-ignored escalation, the GGML_ASSERT step to
no speculation, the memory floor and the bad flag on the real binary are issue 15's
remaining real-binary tests (NOTES): their decisions are covered by the field cases.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from supervisor.chaos import scenarios
from supervisor.chaos.harness import ROOT, Rig
from tests.helpers.freezer import Freezer

LLAMACPP = ROOT / ".llamacpp"
SERVER = LLAMACPP / "bin" / "llama-server"
GiB = 1024**3



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
                   "memory_floor": {"min_available_bytes": int(max(2 * GiB, avail - 2.5 * GiB))}},
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


def _wedge(rig: Rig, inject, release) -> tuple:
    """Inject a wedge under the fleet; wait for the hang verdict, release, see it serve."""
    run = rig.ready_run()
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

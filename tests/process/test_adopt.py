"""Issue 31 item 1, the last part: the supervisor watches an engine it did not start
(``engine.adopt``), the whole service in-process against the stand-in engine
(tests/helpers/fake_engine.py) started by the test, real processes and signals, a real
SQLite store, levers over the real admin API.

- by ``pid_file``, advising: adopted (READY, on record with its selector); an operator's
  step down is only advised, with the reason (it cannot be relaunched); the engine's group
  SIGKILLed is recorded as a would-be restart and nothing is done; the engine restarted
  by hand (a new pid) is found again; the supervisor's stop leaves it running;
- by ``cmdline``, acting with ``take_over``: the same kill is cleared, recorded as a stop
  of the adopted engine, and the policy's command is launched as the supervisor's own;
- a ``cmdline`` that matches two engines adopts neither, and says which pids matched;
  ``port`` finds the listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from agent_supervisor.act.adopt_find import Absent, Found, find_process
from agent_supervisor.policy.adopt import AdoptSpec
from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.admin_api import TOKEN, auth
from tests.helpers.paths import FAKE_ENGINE
from tests.helpers.policies import fake_engine_policy
from tests.helpers.ports import free_ports
from tests.helpers.waiting import wait_for

FAST = {"tick_seconds": 0.2, "probe_timeout_seconds": 1}


def stand_in(port: int, log: Path, *extra: str) -> subprocess.Popen:
    """The stand-in engine as an operator would have started it: its own session, its
    log to a file; not the supervisor's doing."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, str(FAKE_ENGINE), "--host", "127.0.0.1", "--port", str(port),
             "--shutdown-timeout", "1", *extra], stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


async def incidents(sup: Supervisor, reader: Store) -> list:
    await sup.writer.flush()
    return list(reversed(reader.incidents()))


async def test_issue_31_adopted_by_pid_file_advise_records_and_leaves_it_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPERVISOR_ADMIN_TOKEN", TOKEN)
    (port,) = free_ports(1)
    log, pid_file = tmp_path / "engine.log", tmp_path / "engine.pid"
    engine = stand_in(port, log)
    pid_file.write_text(f"{engine.pid}\n")
    policy = fake_engine_policy(
        tmp_path, sampling=FAST, mode="advise", restart={"restart_delay_seconds": 0},
        engine={"port": port, "adopt": {"pid_file": "engine.pid", "log_file": str(log),
                                        "find_interval_seconds": 0.2}})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    reader = Store.open(policy.database_url, fleet=policy.fleet)
    task = asyncio.create_task(sup.run())
    second = None
    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                       what="the stand-in adopted")
        run = sup.launcher.run
        assert run is not None and run.pid == engine.pid and sup.launcher.adopted
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{policy.admin.port}",
                                     timeout=10) as client:
            st = (await client.get("/api/status")).json()
            assert st["adopt"]["state"] == "adopted" and st["adopt"]["pid"] == engine.pid
            assert st["adopt"]["selector"] == "pid_file 'engine.pid'"
            r = await client.post("/api/actions/step-down", headers=auth())
            assert r.status_code == 200
        t0 = time.monotonic()
        while not any(i.action == "would_step_down" for i in await incidents(sup, reader)):
            assert time.monotonic() - t0 < 10, "no advice on the operator's step down"
            await asyncio.sleep(0.1)
        got = await incidents(sup, reader)
        adopted = next(i for i in got if i.kind == "engine_adopted")
        assert f"pid {engine.pid}" in adopted.explanation and str(log) in adopted.explanation
        step = next(i for i in got if i.action == "would_step_down")
        assert step.explanation.startswith("not done (the adopted engine (found by pid_file "
                                           "'engine.pid') cannot be relaunched")
        assert engine.poll() is None and sup.launcher.run is run      # nothing was done

        t_kill = time.monotonic()
        kill_group(engine)                       # the whole engine, as a crash would
        await wait_for(lambda: sup.launcher.state is EngineState.CRASHED, timeout=10,
                       what="the crash seen")
        t0 = time.monotonic()
        while not any(i.action == "would_restart" for i in await incidents(sup, reader)):
            assert time.monotonic() - t0 < 10, "no would-be restart recorded"
            await asyncio.sleep(0.1)
        print(f"\nSIGKILL -> crash seen {t0 - t_kill:.2f} s, would_restart on record "
              f"{time.monotonic() - t_kill:.2f} s")
        await asyncio.sleep(1.5)                 # more ticks and finds: still nothing done
        assert sup.launcher.state is EngineState.CRASHED and sup.launcher.run is run
        assert len(reader.runs()) == 1
        adopt = sup.status_view.status().adopt
        assert adopt["state"] == "waiting for the engine to adopt"
        assert adopt["waiting"].endswith(f"names pid {engine.pid}, which is not running")
        with contextlib.suppress(httpx.HTTPError):
            r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            pytest.fail(f"something serves on the engine's port: {r.status_code}")

        second = stand_in(port, log)             # its operator restarts it: a new pid
        pid_file.write_text(f"{second.pid}\n")
        t0 = time.monotonic()
        await wait_for(lambda: sup.launcher.run is not run
                       and sup.launcher.state is EngineState.READY, timeout=20,
                       what="the restarted engine found again")
        print(f"new pid written -> adopted and READY {time.monotonic() - t0:.2f} s")
        assert sup.launcher.run.pid == second.pid
        await sup.writer.flush()
        assert len(reader.runs()) == 2
    finally:
        sup.request_stop("test over")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        alive_after = second is not None and second.poll() is None
        for proc in (engine, second):
            if proc is not None:
                kill_group(proc)
        reader.close()
    assert alive_after, "the supervisor's stop must leave an adopted engine running"


async def test_issue_31_adopted_by_cmdline_act_with_take_over_launches_its_own(
        tmp_path: Path) -> None:
    (port,) = free_ports(1)
    log = tmp_path / "engine.log"
    engine = stand_in(port, log)
    policy = fake_engine_policy(
        tmp_path, sampling=FAST, restart={"restart_delay_seconds": 0},
        engine={"port": port, "adopt": {"cmdline": rf"fake_engine\.py .*--port {port}\b",
                                        "take_over": True, "find_interval_seconds": 0.2}})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    reader = Store.open(policy.database_url, fleet=policy.fleet)
    task = asyncio.create_task(sup.run())
    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=20,
                       what="the stand-in adopted")
        run = sup.launcher.run
        assert run is not None and run.pid == engine.pid
        kill_group(engine)
        await wait_for(lambda: sup.launcher.run is not run
                       and sup.launcher.state is EngineState.READY, timeout=30,
                       what="the policy's own engine launched")
        own = sup.launcher.run
        assert own.pid != engine.pid and psutil.Process(own.pid).ppid() == os.getpid()
        assert sup.launcher.taken_over and not sup.launcher.adopted
        got = await incidents(sup, reader)
        kinds = [i.kind for i in got]
        assert kinds.index("engine_adopted") < kinds.index("adopted_engine_stopped") \
            < kinds.index("adopted_engine_taken_over")
        stopped = next(i for i in got if i.kind == "adopted_engine_stopped")
        assert "relaunched with the policy's command" in stopped.explanation
        took = next(i for i in got if i.kind == "adopted_engine_taken_over")
        assert f"pid {own.pid}" in took.explanation and took.run_id == own.run_id
    finally:
        sup.request_stop("test over")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        kill_group(engine)
        reader.close()
    assert not psutil.pid_exists(own.pid) or psutil.Process(own.pid).status() == "zombie", \
        "the supervisor's own engine is stopped with it"


async def test_issue_31_a_cmdline_matching_two_engines_adopts_neither(tmp_path: Path) -> None:
    a_port, b_port = free_ports(2)
    a = stand_in(a_port, tmp_path / "a.log")
    b = stand_in(b_port, tmp_path / "b.log")
    try:
        spec = AdoptSpec(cmdline=rf"fake_engine\.py .*--port ({a_port}|{b_port})\b")
        t0 = time.monotonic()
        found = find_process(spec, tmp_path)
        print(f"\none cmdline search: {time.monotonic() - t0:.3f} s")
        assert isinstance(found, Absent)
        assert found.candidates == tuple(str(p) for p in sorted((a.pid, b.pid)))
        assert f"pids {min(a.pid, b.pid)}, {max(a.pid, b.pid)}" in found.reason
        one = find_process(AdoptSpec(cmdline=rf"--port {a_port}\b"), tmp_path)
        assert isinstance(one, Found) and one.pid == a.pid     # its EngineCore is its own
        t0 = time.monotonic()
        while not isinstance(by_port := find_process(AdoptSpec(port=b_port), tmp_path),
                             Found):
            assert time.monotonic() - t0 < 10, f"port {b_port}: {by_port}"
            await asyncio.sleep(0.1)                 # it binds once "loaded" (0.2 s)
        assert by_port.pid == b.pid and "--port" in by_port.cmdline
        nobody = find_process(AdoptSpec(port=free_ports(1)[0]), tmp_path)
        assert isinstance(nobody, Absent) and nobody.reason.startswith("no live process "
                                                                       "listening on port")
    finally:
        kill_group(a)
        kill_group(b)

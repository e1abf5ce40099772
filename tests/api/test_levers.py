"""Issue 19: ``supervisor status | pin | unpin | step | pause | resume | restart | logs``
as a subprocess against a running service (fake engine, real HTTP, real token check)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.admin_api import TOKEN
from tests.helpers.paths import ROOT
from tests.helpers.ports import free_port
from tests.helpers.stacks import PY_SPY
from tests.helpers.waiting import wait_for


async def cli(sup: Supervisor, *args: str, token: str | None = TOKEN,
              url: str | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SUPERVISOR_ADMIN_TOKEN"}
    env["PYTHONPATH"] = str(ROOT)
    if token is not None:
        env["SUPERVISOR_ADMIN_TOKEN"] = token
    url = url or f"http://127.0.0.1:{sup.policy.admin.port}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_supervisor", *args, "--url", url, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def ready_in(sup: Supervisor, rung: int) -> None:
    await wait_for(lambda: sup.ladder.rung == rung and sup.launcher.state is EngineState.READY,
                   timeout=30, what=f"engine ready on rung {rung}")


async def test_issue_19_status_text_and_json(service: Supervisor) -> None:
    await asyncio.sleep(1.0)
    rc, out, err = await cli(service, "status")
    assert rc == 0, err
    first, why, calm, memory, inflight, ladder, *rungs = out.splitlines()
    assert first.startswith("fleet test: mode fast (rung 0 of 1), engine ready for ")
    assert why.startswith("why: engine ready in mode fast")
    assert calm.startswith("calm ") and "probation: none; pinned: no; paused: no" in calm
    assert "before a step up" not in calm                      # the top rung: none to take
    assert memory.startswith("memory: MemAvailable ") and "unknown" not in memory
    assert inflight.startswith("in flight: engine 0 running, 0 waiting; gateway 0 in flight")
    assert ladder == "ladder:" and rungs[0].startswith("  * 0 fast") and "1 safe" in rungs[1]
    rc, out, _ = await cli(service, "status", "--json")
    st = json.loads(out)
    assert (rc, st["mode"], st["rung"], st["engine_state"]) == (0, "fast", 0, "ready")
    assert st["memory"]["mem_available_bytes"] > st["memory"]["memory_floor_bytes"] > 0
    assert st["in_flight"]["engine_requests_running"] == 0


async def test_issue_19_every_lever_moves_the_ladder(service: Supervisor) -> None:
    rc, out, err = await cli(service, "step", "down")
    assert (rc, out.strip()) == (0, "step-down: done; mode fast, stepping to safe"), err
    await ready_in(service, 1)
    rc, out, _ = await cli(service, "status")
    calm_needed = service.policy.hysteresis.calm_seconds
    assert f" of {calm_needed:g} s before a step up" in out.splitlines()[2]
    rc, _, err = await cli(service, "step", "down")             # no rung below the safest
    assert rc == 1 and "HTTP 409" in err and "no rung down of safe" in err
    rc, out, _ = await cli(service, "step", "up")
    assert rc == 0
    await ready_in(service, 0)
    rc, out, _ = await cli(service, "pin", "safe")
    assert (rc, out.strip()) == (0, "pin: done; mode fast, pinned to safe")
    await ready_in(service, 1)
    assert service.ladder.state.pinned == 1
    rc, _, err = await cli(service, "pin", "no-such-mode")
    assert rc == 2 and "no mode 'no-such-mode'" in err
    assert (await cli(service, "unpin"))[0] == 0 and service.ladder.state.pinned is None
    assert (await cli(service, "pause"))[0] == 0 and service.ladder.state.paused
    rc, out, _ = await cli(service, "status")
    assert "paused: yes" in out
    assert (await cli(service, "resume"))[0] == 0 and not service.ladder.state.paused
    run_id = service.launcher.run.run_id
    rc, out, _ = await cli(service, "restart")
    assert (rc, out.strip()) == (0, "restart: done; mode safe")
    await wait_for(lambda: service.launcher.run.run_id != run_id
                   and service.launcher.state is EngineState.READY, timeout=30,
                   what="a new run after the restart")
    assert service.ladder.rung == 1 and not service.ladder.state.restart_requested


async def test_issue_19_no_token_wrong_token_and_no_service(service: Supervisor) -> None:
    rc, _, err = await cli(service, "pause", token=None)
    assert rc == 4 and "not authorised" in err and "no token given" in err
    rc, _, err = await cli(service, "pause", token="wrong")
    assert rc == 4 and TOKEN not in err and "wrong" not in err
    assert not service.ladder.state.paused
    rc, out, _ = await cli(service, "status", token=None)     # reads are open on loopback
    assert rc == 0 and out.startswith("fleet test")
    rc, _, err = await cli(service, "status", url=f"http://127.0.0.1:{free_port()}")
    assert rc == 5 and "unreachable" in err


async def _ended(proc: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
    """``proc``'s output once it exits after its SIGINT; still running 20 s later: its
    Python stacks in the failure (py-spy), then SIGKILL and reaped, so no process and no
    pipe of it outlives the test (unreaped, they failed the worker's next test with
    ResourceWarnings, 2026-12-04)."""
    try:
        return await asyncio.wait_for(proc.communicate(), 20)
    except TimeoutError:
        dump = await asyncio.create_subprocess_exec(
            str(PY_SPY or "py-spy"), "dump", "--pid", str(proc.pid),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        stacks, _ = await asyncio.wait_for(dump.communicate(), 20)
        proc.kill()
        _out, err = await proc.communicate()
        raise AssertionError("supervisor logs -f still running 20 s after SIGINT; its "
                             f"stacks:\n{stacks.decode(errors='replace')}\nstderr: "
                             f"{err.decode(errors='replace')[-2000:]}; this process's SIGINT: "
                             f"{signal.getsignal(signal.SIGINT)!r}, blocked "
                             f"{signal.pthread_sigmask(signal.SIG_BLOCK, [])!r}") from None


def _default_sigint() -> None:
    """In the child before exec: SIGINT delivered and at its default, whatever the test
    worker's own state (an ignored or blocked SIGINT is inherited across exec; a ``logs
    -f`` started with one would not end on Ctrl-C)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def test_issue_19_logs_and_logs_follow_across_a_restart(service: Supervisor) -> None:
    log = service.launcher.run.log_path
    await wait_for(lambda: log.exists() and log.stat().st_size > 0, timeout=10,
                   what="engine log")
    rc, out, _ = await cli(service, "logs", "-n", "3")
    got, lines = out.splitlines(), log.read_text().splitlines()
    # The last 3 lines when the CLI read them (the fake engine logs every probe since).
    ends = [i + 3 for i in range(len(lines) - 2) if lines[i:i + 3] == got]
    assert rc == 0 and len(got) == 3 and ends and ends[-1] >= len(lines) - 10, (got, lines[-10:])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    follow = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_supervisor", "logs", "-f", "-n", "1", "--interval", "0.2",
        "--url", f"http://127.0.0.1:{service.policy.admin.port}", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=_default_sigint)
    try:
        await asyncio.sleep(2.0)
        old = service.launcher.run.run_id
        assert (await cli(service, "restart"))[0] == 0
        await wait_for(lambda: service.launcher.run.run_id != old
                       and service.launcher.state is EngineState.READY, timeout=30,
                       what="restarted engine")
        new_log = service.launcher.run.log_path
        await asyncio.sleep(1.5)
    finally:
        follow.send_signal(signal.SIGINT)
        out, err = await _ended(follow)
    assert follow.returncode == 0, err.decode()
    new_run = service.launcher.run.run_id
    assert f"--- engine run {new_run} (mode fast): {new_log} ---" in err.decode()
    assert new_log.read_text().splitlines()[0] in out.decode().splitlines()

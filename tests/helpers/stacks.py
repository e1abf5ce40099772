"""A hung engine for the stack-dump tests (issue 31 item 3) and advise mode's hang
(tests/process/test_advise.py): a real Python process group (an API-server
stand-in and a forked "EngineCore" child, both blocked in ``time.sleep`` inside named
functions) run by the real launcher, a recorder of what the executor records, and py-spy
where the dev extra installed it."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from agent_supervisor.act.engine_run import EngineRun
from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.act.processes import group_members
from agent_supervisor.act.stack_dump import stack_tool
from agent_supervisor.decide.findings import Finding
from tests.helpers.policies import fake_engine_policy

PY_SPY = stack_tool("vllm")
needs_py_spy = pytest.mark.skipif(PY_SPY is None, reason="py-spy not installed (dev extra)")
#: PATH of the system alone: no py-spy there (it comes with the virtualenv).
SYSTEM_PATH = "/usr/bin:/bin"


HUNG_ENGINE = textwrap.dedent("""
    import os, signal, sys, time

    def engine_loop_blocked():
        while True:
            time.sleep(3600)

    def api_server_waiting():
        while True:
            time.sleep(3600)

    if "--ignore-sigterm" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        engine_loop_blocked()
    print("started", flush=True)
    api_server_waiting()
""")


class Recorder:
    """Keeps what the executor records."""

    def __init__(self) -> None:
        self.incidents: list[Incident] = []

    def decision(self, action: str) -> None:
        pass

    def incident(self, incident: Incident, transition: Transition | None = None,
                 findings: tuple[Finding, ...] = ()) -> None:
        self.incidents.append(incident)

    def run_started(self, run: EngineRun, port: int) -> None:
        pass


def hung_engine(tmp_path: Path, budget: float, *extra: str) -> EngineLauncher:
    script = tmp_path / "hung_engine.py"
    script.write_text(HUNG_ENGINE)
    policy = fake_engine_policy(tmp_path, engine={"args": [str(script), *extra]},
                                lifecycle={"stack_dump_seconds": budget})
    return EngineLauncher(policy)


async def started(launcher: EngineLauncher) -> EngineRun:
    run = await launcher.start(rung=0)
    deadline = time.monotonic() + 10
    while len(group_members(run.pid)) < 2 or "started" not in run.log_path.read_text():
        assert time.monotonic() < deadline, "the hung engine did not start"
        time.sleep(0.02)
    return run

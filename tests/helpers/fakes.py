"""Recording fakes for the executor's collaborators (tests/unit/test_executor.py and its
neighbours): ``FakeEngine``, ``FakeGateway`` and ``FakeRecorder`` note what they were asked
to do, so a test asserts on it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from agent_supervisor.act.engine_run import EngineRun
from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.decide.findings import Finding
from agent_supervisor.errors import EngineStopTimeout
from agent_supervisor.states import CrashReason, EngineState


class FakeEngine:
    """Records start/stop/kill; ``state`` is what the test sets."""

    def __init__(self, state: EngineState = EngineState.READY, stop_fails: bool = False):
        self.state = state
        self.run: EngineRun | None = None
        self.calls: list[tuple] = []
        self.stop_fails = stop_fails

    async def start(self, *, rung: int, start_args: tuple = ()) -> EngineRun:
        self.calls.append(("start", rung) + ((dict(start_args),) if start_args else ()))
        self.run = EngineRun(run_id=f"run-{len(self.calls)}", rung=rung, mode=f"m{rung}",
                             argv=["vllm"], log_path=Path("/tmp/x.log"), tmp_dir=Path("/tmp"),
                             started_s=0.0, started_at=datetime.now(UTC), pid=1234)
        return self.run

    async def stop(self, *, reason: str) -> None:
        self.calls.append(("stop", reason))
        if self.stop_fails:
            raise EngineStopTimeout("survived", engine_pid=1234, survivors=[1235])

    async def kill(self, *, reason: str, crash: CrashReason | None = None,
                   emergency: str | None = None) -> None:
        self.calls.append(("kill", reason, crash, emergency))


class FakeGateway:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def hold(self, reason: str, *, drain: bool = True) -> None:
        self.calls.append(("hold", drain))

    def release(self, rung: int) -> None:
        self.calls.append(("release", rung))

    def set_shed(self, shed: bool) -> None:
        self.calls.append(("shed", shed))


class FakeRecorder:
    def __init__(self) -> None:
        self.incidents: list[tuple[Incident, Transition | None, tuple[Finding, ...]]] = []
        self.decisions: list[str] = []
        self.runs: list[tuple[str, int]] = []

    def decision(self, action: str) -> None:
        self.decisions.append(action)

    def incident(self, incident: Incident, transition: Transition | None = None,
                 findings: tuple[Finding, ...] = ()) -> None:
        self.incidents.append((incident, transition, findings))

    def run_started(self, run: EngineRun, port: int) -> None:
        self.runs.append((run.run_id, port))

"""The real admin app (``create_admin_app``: routes, token check, the dashboard's files)
over a stand-in of the running service: a status the test sets, a real SQLite store the
test fills, an engine log file the test writes, levers that only record what was asked.
Served by uvicorn on a free port in a thread, so a browser or the ``supervisor`` command
can be pointed at a situation (a crash at 3 a.m.) without waiting for one to happen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry

from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.policy import Policy
from agent_supervisor.record.models import EngineRunRow, IncidentRow
from agent_supervisor.record.store import Store
from agent_supervisor.show.api.app import create_admin_app
from agent_supervisor.show.api.models import LadderRung, StatusOut
from agent_supervisor.telemetry.sample import Sample


def status_of(policy: Policy, *, rung: int = 0, engine_state: str = "ready",
              barred: dict[int, float] | None = None, **extra: Any) -> StatusOut:
    """A status on ``rung`` with the engine in ``engine_state``; ``barred``: rung ->
    seconds it stays barred."""
    barred = barred or {}
    fields: dict[str, Any] = dict(
        fleet=policy.fleet, version="0.1.0", mode=policy.modes[rung].name, rung=rung,
        ladder=[LadderRung(rung=i, mode=m.name, description=m.description,
                           speculative=m.speculative, current=i == rung,
                           barred_until_seconds=barred.get(i))
                for i, m in enumerate(policy.modes)],
        engine_state=engine_state, engine_run_id="run-now", engine_pid=4242,
        engine_seconds_in_state=12.0, last_decision=None, paused=False, pinned=None,
        requested=None, probation_seconds_left=None, shed=False, calm_seconds=0.0,
        gateway=None, limits={}, last_decision_seconds_ago=None, uptime_seconds=600.0)
    fields.update(extra)
    return StatusOut(**fields)


@dataclass
class StubService:
    """What the admin app reads of the running service (``AdminBackend``)."""

    policy: Policy
    store: Store
    log_path: Path
    st: StatusOut
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    operated: list[tuple[str, str | None]] = field(default_factory=list)

    def samples(self) -> list[Sample]:
        return []

    def status(self) -> StatusOut:
        return self.st

    def operate(self, action: str, mode: str | None = None) -> LadderState:
        self.operated.append((action, mode))
        names = [m.name for m in self.policy.modes]
        if action == "pin":
            return LadderState(rung=self.st.rung, pinned=names.index(mode or ""))
        if action == "step-down":
            return LadderState(rung=self.st.rung, requested=self.st.rung + 1)
        return LadderState(rung=self.st.rung, paused=action == "pause")

    def engine_log(self) -> tuple[str, str, Path] | None:
        return (self.st.engine_run_id or "run-now", self.st.mode, self.log_path)

    async def before_scrape(self) -> None:
        return None


def add_run(store: Store, *, run_id: str, mode: str, startup_seconds: float | None,
            ago_s: float = 3600.0) -> None:
    """One recorded engine run of ``mode`` that took ``startup_seconds`` to serve (None:
    it never did)."""
    started = datetime.now(UTC) - timedelta(seconds=ago_s)
    with store.session() as s:
        s.add(EngineRunRow(
            run_id=run_id, fleet=store.fleet, host=store.host, mode=mode, rung=0, argv=[],
            pid=1, port=1, log_path="/dev/null", started_at=started,
            ready_at=None if startup_seconds is None
            else started + timedelta(seconds=startup_seconds),
            ended_at=started + timedelta(seconds=600), startup_seconds=startup_seconds,
            outcome="stopped"))


def add_incident(store: Store, *, log_tail: str, kind: str = "engine_exited") -> int:
    """One critical incident with ``log_tail``; its id."""
    with store.session() as s:
        row = IncidentRow(
            fleet=store.fleet, host=store.host, kind=kind, severity="critical",
            started_at=datetime.now(UTC) - timedelta(seconds=30), mode="fast", rung=0,
            action="restart", outcome=None, explanation="the engine exited", run_id="run-1",
            findings=[], kernel_lines=[], log_tail=log_tail)
        s.add(row)
        s.flush()
        return row.id


@contextmanager
def serving(service: StubService, *, token: str | None = None) -> Iterator[str]:
    """The admin app over ``service`` on its policy's admin port; yields the base URL."""
    port = service.policy.admin.port
    server = uvicorn.Server(uvicorn.Config(create_admin_app(service, token=token),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the stub admin app did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)

"""``Rig``: one ``supervisor run`` of a chaos policy, a fleet of agents through its
gateway, and the measurements every scenario shares.

The policy is the CPU demo's engine on the tiny Llama target (no speculation: faults,
not speed, are under test) with a ladder of three rungs, a short hang window and a
memory floor the balloon can reach on this machine. Times: the injection's
``time.time()`` against the store's UTC records (one host clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from agent_supervisor.act.processes import group_members
from agent_supervisor.load.agents import RequestRecord
from agent_supervisor.load.fleet import Fleet
from agent_supervisor.record.store import Store

__all__ = ["ROOT", "Result", "Rig", "chaos_policy", "free_port"]

ROOT = Path(__file__).resolve().parents[2]
GiB = 1024**3


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chaos_policy(state: Path, **overrides: Any) -> dict[str, Any]:
    """The chaos suite's policy as a mapping (write it with ``yaml.safe_dump``)."""
    avail = psutil.virtual_memory().available
    data: dict[str, Any] = {
        "fleet": "chaos",
        "engine": {
            "executable": ".engine-venv/bin/python",
            "args": ["-m", "vllm.entrypoints.openai.api_server", "--model",
                     ".demo-models/target", "--served-model-name", "tiny-agent",
                     "--enforce-eager", "--max-model-len", "1024"],
            "environment": {"VLLM_CPU_KVCACHE_SPACE": "1"},
            "working_directory": str(ROOT), "port": free_port(),
            "start_timeout_seconds": 240, "shutdown_timeout_seconds": 10,
        },
        "modes": [{"name": "plain8", "args": {"--max-num-seqs": 8},
                   "gateway": {"max_concurrency": 8, "max_queue": 64}},
                  {"name": "plain4", "args": {"--max-num-seqs": 4},
                   "gateway": {"max_concurrency": 4, "max_queue": 64}},
                  {"name": "safe", "args": {"--max-num-seqs": 2},
                   "gateway": {"max_concurrency": 2, "max_queue": 64}}],
        "restart": {"start_limit_burst": 20, "restart_delay_seconds": 0,
                    "restart_delay_max_seconds": 0},
        "guards": {"engine_hung": {"stall_seconds": 15, "ready_grace_seconds": 5},
                   # Floor at a quarter of what is free now: the balloon can reach it
                   # without starving the machine.
                   "memory_floor": {"min_available_bytes": int(max(2 * GiB, avail / 4))},
                   # The memory row times the floor's kill: a forecast step down first
                   # would leave no engine to kill (the start is then held while memory
                   # stays under the floor; a 5 s horizon still stepped down first, 10 s
                   # before the crossing), so the rig's forecast is off for a day of
                   # each run (it ignores the trend that long after ready).
                   "memory_forecast": {"ignore_after_ready_seconds": 86400}},
        "sampling": {"tick_seconds": 1, "canary_after_seconds": 5,
                     "canary_timeout_seconds": 5},
        "gateway": {"port": free_port(), "hold_timeout_seconds": 300},
        "admin": {"port": free_port()},
        "recovery": {"on_restart": "adopt", "watch_policy_file": False},
        "storage": {"state_directory": str(state)},
    }
    for key, value in overrides.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and key in data else value
    return data


@dataclass
class Result:
    """One row of the chaos table."""

    scenario: str
    detected_seconds: float | None = None
    action: str | None = None
    serving_again_seconds: float | None = None
    requests_failed: int = 0
    requests_total: int = 0
    incident: str | None = None
    ok: bool = False
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Rig:
    """A supervisor process, its store, and a background fleet through its gateway."""

    def __init__(self, state: Path, **overrides: Any) -> None:
        state.mkdir(parents=True, exist_ok=True)
        self.state = state
        self.data = chaos_policy(state, **overrides)
        self.policy_path = state / "policy.yaml"
        self.policy_path.write_text(yaml.safe_dump(self.data, sort_keys=False))
        self.db = self.data["storage"].get("database_url") or f"sqlite:///{state}/supervisor.db"
        self.proc: subprocess.Popen | None = None
        self.records: list[RequestRecord] = []
        self._store: Store | None = None
        self._store_lock = threading.Lock()
        self._fleets: list[tuple[asyncio.AbstractEventLoop, asyncio.Event,
                                 threading.Thread]] = []

    # -- the supervisor --------------------------------------------------------------

    def start(self) -> None:
        """Start ``supervisor run`` (its log in the state directory).

        Raises ``PolicyError`` first if the rig's policy would be refused."""
        from agent_supervisor.policy import load_policy_file

        load_policy_file(self.policy_path)
        with open(self.state / "supervisor.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agent_supervisor", "run", "--policy", str(self.policy_path),
                 "--record", str(self.state / "trace.jsonl")],
                cwd=ROOT, stderr=log, start_new_session=True)

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM the supervisor and wait for it."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill_supervisor(self) -> None:
        """SIGKILL the supervisor process alone (its engine lives on)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def upgrade_supervisor(self, timeout: float = 120) -> None:
        """SIGUSR1: the supervisor exits 0, leaving the engine and the gateway."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGUSR1)
        code = self.proc.wait(timeout)
        assert code == 0, f"the supervisor exited {code} on SIGUSR1:\n{self.log_tail()}"

    def gateway_pid(self) -> int | None:
        """The gateway process's pid (its pid file), or None."""
        try:
            return int((self.state / "gateway.pid").read_text())
        except (OSError, ValueError):
            return None

    def resumed_since(self, start: float) -> dict[str, int]:
        """Requests the gateway carried across a crash since ``start`` (epoch s), by
        continuation (token, text, whole) and outcome, from the ``stream_resumed``
        incidents."""
        out: dict[str, int] = {}
        for i in self.incidents():
            if i.kind == "stream_resumed" and i.started_at.timestamp() >= start:
                f = i.findings[0] if i.findings else {}
                key = f"{f.get('continuation')}:{f.get('outcome')}"
                out[key] = out.get(key, 0) + 1
        return out

    def store(self) -> Store:
        """The rig's view of the store: opened (and migrated) once, shared by threads
        (Alembic's migration context is not thread-safe; SQLAlchemy sessions are per call)."""
        with self._store_lock:
            if self._store is None:
                self._store = Store.open(self.db, fleet=self.data["fleet"])
            return self._store

    def runs(self) -> list[Any]:
        """Engine runs, oldest first."""
        return list(reversed(self.store().runs(limit=1000)))

    def incidents(self) -> list[Any]:
        """Incidents, oldest first."""
        return list(reversed(self.store().incidents(limit=1000)))

    def wait(self, what: str, predicate: Any, timeout: float = 300.0) -> Any:
        """Poll ``predicate`` every 0.05 s until it returns something truthy."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = predicate()
            except Exception as exc:  # noqa: BLE001 - the store or the API may not be up yet
                value, last_error = None, exc
            if value:
                return value
            if self.proc is not None and self.proc.poll() is not None and what != "exit":
                raise AssertionError(f"supervisor exited {self.proc.returncode} waiting for "
                                     f"{what}; {self.state / 'supervisor.log'} ends:\n"
                                     + self.log_tail())
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last "
                             f"error of the check: {last_error!r}); "
                             f"{self.state / 'supervisor.log'} ends:\n" + self.log_tail())

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the supervisor's log (CI keeps no temp files)."""
        try:
            text = (self.state / "supervisor.log").read_text(errors="replace")
        except OSError as exc:
            return f"(unreadable: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def ready_run(self, after: float = 0.0, besides: str | None = None) -> Any:
        """Wait for an engine run started after ``after`` (epoch s, 0.5 s of slack) to be
        ready; ``besides``: a run id that does not count (the run a scenario just killed:
        llama-server is ready 0.1-0.7 s after its spawn, inside the slack)."""
        def check():
            runs = [r for r in self.runs() if r.started_at.timestamp() >= after - 0.5
                    and r.run_id != besides]
            return next((r for r in runs if r.ready_at is not None), None)
        return self.wait("a ready engine", check)

    def api(self, path: str) -> Any:
        port = self.data["admin"]["port"]
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5).json()

    def metrics(self) -> str:
        """The supervisor's /metrics text."""
        port = self.data["admin"]["port"]
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text

    def action(self, name: str, **body: Any) -> Any:
        port = self.data["admin"]["port"]
        token = os.environ.get("SUPERVISOR_ADMIN_TOKEN", "")
        return httpx.post(f"http://127.0.0.1:{port}/api/actions/{name}", json=body or None,
                          headers={"Authorization": f"Bearer {token}"}, timeout=10).json()

    # -- the engine's processes --------------------------------------------------------

    def engine_pid(self) -> int:
        """The current engine's API server pid (the newest run that has not ended)."""
        return self.wait("engine pid", lambda: next(
            (r.pid for r in reversed(self.runs()) if r.ended_at is None and r.pid), None))

    @staticmethod
    def child(api_pid: int, title: str) -> int:
        """Pid of the descendant whose process title starts with ``title``.

        A descendant that exits, turns zombie or cannot be read while it is looked at is
        passed over (issue 34: ``psutil.ZombieProcess`` from an EngineCore killed a
        moment before ended the day benchmark with a traceback). Raises AssertionError
        when there is no such descendant, or ``api_pid`` itself is gone."""
        try:
            children = psutil.Process(api_pid).children(recursive=True)
        except psutil.Error as exc:
            raise AssertionError(f"no {title} under {api_pid}: {exc}") from None
        for p in children:
            try:
                argv = p.cmdline()
            except psutil.Error:         # NoSuchProcess, ZombieProcess, AccessDenied
                continue
            if argv[:1] and argv[0].startswith(title):
                return p.pid
        raise AssertionError(f"no {title} under {api_pid}")

    @staticmethod
    def group_gone(pgid: int) -> bool:
        """Whether no live process of the group is left."""
        return not group_members(pgid)

    # -- the fleet -------------------------------------------------------------------

    def start_fleet(self, sessions: int = 6, **kw: Any) -> None:
        """Agents through the gateway, in a thread with its own event loop (one more
        fleet per call; ``stop_fleet`` stops them all)."""
        port = self.data["gateway"]["port"]
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            fleet = Fleet(f"http://127.0.0.1:{port}/v1", "tiny-agent", sessions=sessions,
                          seed=len(self._fleets), **kw)
            fleet.records = self.records
            loop.run_until_complete(fleet.run(3600, stop))
            loop.close()

        thread = threading.Thread(target=run, daemon=True)
        self._fleets.append((loop, stop, thread))
        thread.start()

    def stop_fleet(self) -> None:
        """Stop every fleet (requests in flight finish first)."""
        for loop, stop, thread in self._fleets:
            if thread.is_alive():
                loop.call_soon_threadsafe(stop.set)
            thread.join(300)
        self._fleets.clear()

    def failed_between(self, start: float, end: float) -> tuple[int, int]:
        """(failed, total) requests that started in ``[start, end]`` (epoch seconds)."""
        offset = time.time() - time.monotonic()
        window = [r for r in list(self.records) if start <= r.started_s + offset <= end]
        return sum(not r.ok for r in window), len(window)

    # -- cleanup ---------------------------------------------------------------------

    def close(self) -> None:
        """Stop everything this rig started, whatever state it is in."""
        self.stop_fleet()
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        for run in self.runs():
            if run.pid and group_members(run.pid):
                os.killpg(run.pid, signal.SIGKILL)
        gateway = self.gateway_pid()            # a supervisor killed last left it
        if gateway is not None and psutil.pid_exists(gateway):
            with contextlib.suppress(ProcessLookupError):
                os.kill(gateway, signal.SIGKILL)
        if self._store is not None:
            self._store.close()

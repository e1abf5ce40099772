"""The day benchmark's arms: a plain restart loop (what systemd ``Restart=always`` gives)
on one rung, and the supervised product (``supervisor run`` through the chaos ``Rig``).

Both expose the same small surface to the fault injector and the report: ``base_url``
(where agents send requests), ``serving_pid()`` (the API server of the engine serving
now, or None), ``intervals()`` (when each engine was serving, epoch seconds) and
``close()`` (stop everything it started and check that nothing survives).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from agent_supervisor.act.engine_env import engine_environment, make_run_tmp_dir
from agent_supervisor.act.processes import (
    ENGINE_SCHEDULING,
    group_members,
    kill_group,
    remove_stale_shm,
    shm_snapshot,
)
from agent_supervisor.chaos.harness import Rig
from agent_supervisor.policy.load import load_policy_file
from agent_supervisor.policy.model import Policy, build_argv

__all__ = ["EngineSpan", "RestartLoop", "Supervised"]

#: systemd's default RestartSec= (100 ms) between an exit and the next start.
RESTART_SEC = 0.1
#: How often the loop probes /health of a starting engine, and its timeout.
HEALTH_POLL_SECONDS = 0.25
#: systemd's default TimeoutStopSec= is 90 s; the day's engines drain in 10.
STOP_TIMEOUT_SECONDS = 20.0


@dataclass
class EngineSpan:
    """One engine process's life, epoch seconds (``ready``: first /health 200)."""

    pid: int
    mode: str
    started: float
    ready: float | None = None
    ended: float | None = None
    exit_code: int | None = None


class RestartLoop:
    """One rung, restarted on every exit: ``Restart=always``, ``RestartSec=100ms``,
    ``KillMode=control-group`` (the whole process group is killed when the main process
    exits, as systemd kills the unit's cgroup), no watchdog (vLLM sends no sd_notify,
    so ``WatchdogSec=`` cannot apply) and no gateway: agents talk to the engine.

    The engine is launched exactly as the supervisor launches it: ``build_argv`` of the
    rung, the engine environment of ``act/engine_env.py`` with a private TMPDIR, its own
    session, the engine's scheduling; /dev/shm files its runs leave are removed as the
    supervisor removes them."""

    def __init__(self, policy: Policy, rung: int, state: Path) -> None:
        self.policy, self.rung, self.state = policy, rung, state
        self.mode = policy.modes[rung]
        self.spans: list[EngineSpan] = []
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name="restart-loop")
        eng = policy.engine
        self.base_url = f"http://{eng.host}:{eng.port}/v1"
        self._health = f"http://{eng.host}:{eng.port}/health"

    def start(self) -> None:
        """Start the loop (returns at once; ``wait_ready`` waits for the first engine)."""
        (self.state / "logs").mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Block until an engine is ready. Raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while self.serving_pid() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {self.mode.name} engine ready in {timeout:.0f} s; "
                                   f"see {self.state / 'logs'}")
            time.sleep(0.2)

    def tmp_dir(self, n: int) -> Path:
        """Run ``n``'s private TMPDIR, made as the supervisor makes one: under
        ``<state>/tmp`` when that is short enough for vLLM's IPC socket paths (107
        bytes), else under $TMPDIR (a pytest tmp_path is too long)."""
        return make_run_tmp_dir(self.policy, f"{time.strftime('%Y%m%dT%H%M%S')}-{n:04d}")

    def _spawn(self, n: int) -> tuple[subprocess.Popen[bytes], Path]:
        tmp = self.tmp_dir(n)
        env = engine_environment(self.policy, tmp)
        with open(self.state / "logs" / f"engine-{n}.log", "ab") as log:
            proc = subprocess.Popen(
                build_argv(self.policy, self.mode), cwd=self.policy.working_directory,
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=ENGINE_SCHEDULING.apply)
        return proc, tmp

    def _loop(self) -> None:
        n = 0
        while not self._stop.is_set():
            before = shm_snapshot()
            proc, tmp = self._spawn(n)
            self._proc = proc
            span = EngineSpan(proc.pid, self.mode.name, time.time())
            self.spans.append(span)
            with httpx.Client(timeout=1.0) as client:
                while proc.poll() is None:
                    if span.ready is None and _healthy(client, self._health):
                        span.ready = time.time()
                    time.sleep(HEALTH_POLL_SECONDS)
            span.ended, span.exit_code = time.time(), proc.returncode
            self._reap(proc.pid)
            remove_stale_shm(before)
            shutil.rmtree(tmp, ignore_errors=True)
            n += 1
            self._stop.wait(RESTART_SEC)

    @staticmethod
    def _reap(pgid: int, timeout: float = 10.0) -> None:
        """KillMode=control-group: SIGKILL what is left of the group, wait for it."""
        kill_group(pgid, signal.SIGCONT)
        kill_group(pgid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def serving_pid(self) -> int | None:
        """The ready engine's API server pid, or None (starting, or between runs)."""
        span = self.spans[-1] if self.spans else None
        if span is None or span.ready is None or span.ended is not None:
            return None
        return span.pid

    def intervals(self, end: float) -> list[tuple[float, float]]:
        """When an engine was ready, ``[(ready, ended or end)]`` (epoch seconds)."""
        return [(s.ready, s.ended or end) for s in self.spans if s.ready is not None]

    def close(self) -> None:
        """``systemctl stop``: SIGTERM the engine (vLLM drains), then SIGKILL the group."""
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            kill_group(proc.pid, signal.SIGCONT)
            kill_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                kill_group(proc.pid, signal.SIGKILL)
        self._thread.join(STOP_TIMEOUT_SECONDS + 15)
        for span in self.spans:
            self._reap(span.pid, timeout=5)

    def summary(self) -> dict[str, Any]:
        """Engine runs and exits, for the report."""
        return {"engine_runs": len(self.spans),
                "exits": [s.exit_code for s in self.spans if s.ended is not None]}


def _healthy(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


class Supervised:
    """The full product: ``supervisor run`` on the whole ladder (``Rig``), agents through
    its gateway, as a user runs it (whichever way the gateway is hosted)."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.base_url = f"http://127.0.0.1:{rig.data['gateway']['port']}/v1"

    def start(self) -> None:
        """Start ``supervisor run``."""
        self.rig.start()

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Block until the supervisor's first engine is ready and the gateway admits."""
        self.rig.ready_run()
        self.rig.wait("the gateway admitting", lambda: self.rig.api("/api/status")
                      .get("engine_state") == "ready", timeout=timeout)

    def serving_pid(self) -> int | None:
        """The API server pid of the supervisor's ready engine, or None."""
        try:
            runs = self.rig.runs()
        except Exception:  # noqa: BLE001 - the store busy mid-write: ask again next time
            return None
        run = next((r for r in reversed(runs) if r.ended_at is None), None)
        return run.pid if run is not None and run.ready_at is not None else None

    def intervals(self, end: float) -> list[tuple[float, float]]:
        """When an engine was ready, from the store's engine runs (epoch seconds)."""
        return [(r.ready_at.timestamp(), r.ended_at.timestamp() if r.ended_at else end)
                for r in self.rig.runs() if r.ready_at is not None]

    def close(self) -> None:
        """SIGTERM the supervisor (it drains and stops its engine), then the rig's sweep."""
        self.rig.close()

    def summary(self) -> dict[str, Any]:
        """Engine runs, incidents and transitions, for the report."""
        store = self.rig.store()
        incidents = [{"at": i.started_at.isoformat(), "kind": i.kind, "severity": i.severity,
                      "mode": i.mode, "action": i.action, "explanation": i.explanation}
                     for i in self.rig.incidents()]
        transitions = [{"at": t.at.isoformat(), "from": t.from_mode, "to": t.to_mode,
                        "actor": t.actor, "reason": t.reason}
                       for t in reversed(store.transitions(limit=1000))]
        runs = self.rig.runs()
        return {"engine_runs": len(runs), "modes": [r.mode for r in runs],
                "incidents": incidents, "transitions": transitions}


def write_policy(state: Path, data: dict[str, Any]) -> Policy:
    """Write ``data`` to ``state/policy.yaml`` and load it (validated)."""
    path = state / "policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_policy_file(path)


def own_processes(base: Path, ports: set[int]) -> list[str]:
    """Processes this run left: an engine on one of ``ports``, or any process whose
    TMPDIR or working directory lies under ``base`` (engines, balloons, supervisors).
    Returns ``"pid cmdline"`` lines; [] when nothing is left."""
    import psutil

    left = []
    me = os.getpid()
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.info["pid"] == me:
            continue
        try:
            cmd = p.info["cmdline"] or []
            env_tmp = p.environ().get("TMPDIR", "") if cmd else ""
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        on_port = any(c == str(port) for port in ports for c in cmd[-8:]) and "--port" in cmd
        if on_port or env_tmp.startswith(str(base)) or any(str(base) in c for c in cmd):
            left.append(f"{p.info['pid']} {' '.join(cmd)[:160]}")
    return left

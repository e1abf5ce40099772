"""The real CPU engine (vLLM) for the integration tests: ``ENGINE_PYTHON`` (.engine-venv),
``MODELS`` (.demo-models), ``demo_policy(tmp_path, **overrides)`` (policies/cpu-demo.yaml on
free ports), ``Service`` (a ``supervisor run`` process and views of what it recorded) and
``engine_core_pid``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from agent_supervisor.record.store import Store
from tests.helpers.paths import ROOT
from tests.helpers.ports import free_port

ENGINE_PYTHON = ROOT / ".engine-venv" / "bin" / "python"


MODELS = ROOT / ".demo-models"


READY_TIMEOUT = 300.0


def demo_policy(tmp_path: Path, **overrides: Any) -> Path:
    """policies/cpu-demo.yaml with its own port and state directory, plus overrides."""
    data = yaml.safe_load((ROOT / "policies" / "cpu-demo.yaml").read_text())
    data["engine"]["working_directory"] = str(ROOT)
    data["engine"]["port"] = free_port()
    data["gateway"] = {**data.get("gateway", {}), "port": free_port()}
    data["admin"] = {**data.get("admin", {}), "port": free_port()}
    data["storage"] = {"state_directory": str(tmp_path / "state")}
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Service:
    """A ``supervisor run`` process and views of what it recorded."""

    def __init__(self, policy_path: Path, extra_args: list[str] | None = None) -> None:
        self.policy_path = policy_path
        data = yaml.safe_load(policy_path.read_text())
        self.port = data["engine"]["port"]
        self.gateway_port = data["gateway"]["port"]
        self.admin_port = data["admin"]["port"]
        self.db = f"sqlite:///{data['storage']['state_directory']}/supervisor.db"
        self.log_path = policy_path.with_suffix(".log")
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent_supervisor", "run", "--policy", str(policy_path),
             *(extra_args or [])],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store.open(self.db, fleet="cpu-demo")
        return self._store

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, what: str, predicate: Callable[[], Any], timeout: float = READY_TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = predicate()
            except Exception:  # noqa: BLE001 - the database may not exist yet
                value = None
            if value:
                return value
            if self.proc.poll() is not None and what != "exit":
                raise AssertionError(f"supervisor exited {self.proc.returncode} while waiting "
                                     f"for {what}:\n{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.log()[-4000:]}")
            time.sleep(0.2)

    def ready_runs(self, n: int):
        """Wait until ``n`` runs have become ready; returns all runs, oldest first."""
        def check():
            runs = list(reversed(self.store.runs()))
            return runs if sum(r.ready_at is not None for r in runs) >= n else None
        return self.wait(f"{n} ready engine runs", check)

    def chat(self, content: str = "I will read the file in main.py") -> dict:
        resp = httpx.post(f"http://127.0.0.1:{self.port}/v1/chat/completions", timeout=60,
                          json={"model": "tiny-agent", "max_tokens": 16, "temperature": 0,
                                "messages": [{"role": "user", "content": content}]})
        assert resp.status_code == 200, resp.text
        return resp.json()

    def stop(self, timeout: float = 90) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self._store is not None:
                self._store.close()
            self._log.close()

    def kill_everything(self) -> None:
        """Last-resort cleanup after a failed test: no engine may outlive it."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        if self._store is not None:
            self._store.close()
        store = Store.open(self.db, fleet="cpu-demo")
        runs = store.runs(limit=1000)
        store.close()
        for run in runs:
            if run.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.pid, signal.SIGKILL)
        # A run spawned just before the supervisor was killed may have no row yet (seen: a
        # test failing while the restart it caused was starting left that engine serving
        # for two hours): any process group led by an engine on this test's own port goes.
        for leader in _engines_on_port(self.port):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(leader, signal.SIGKILL)
        # The gateway outlives a killed supervisor by design (issue 14) and ends only when
        # its state directory goes, which pytest keeps: a test's gateway ends with it.
        pid_file = Path(self.db.removeprefix("sqlite:///")).parent / "gateway.pid"
        with contextlib.suppress(OSError, ValueError, psutil.Error):
            gateway = psutil.Process(int(pid_file.read_text().split()[0]))
            if "gateway" in gateway.cmdline() and str(self.policy_path) in gateway.cmdline():
                gateway.terminate()


def _engines_on_port(port: int) -> list[int]:
    """Pids of process-group leaders whose argv says ``--port PORT``."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        argv = proc.info["cmdline"] or []
        with contextlib.suppress(ValueError, IndexError, psutil.Error):
            if argv[argv.index("--port") + 1] == str(port) and os.getpgid(proc.pid) == proc.pid:
                found.append(proc.pid)
    return found


def engine_core_pid(api_pid: int) -> int:
    """Pid of the ``VLLM::EngineCore`` process under the API server ``api_pid``."""
    for child in psutil.Process(api_pid).children(recursive=True):
        if child.cmdline()[:1] and child.cmdline()[0].startswith("VLLM::EngineCore"):
            return child.pid
    raise AssertionError(f"no VLLM::EngineCore under pid {api_pid}")

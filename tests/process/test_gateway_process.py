"""Issue 14, item 2: the gateway in its own process, with real processes, signals and
sockets (the fake engine). Agents' requests through it while the supervisor is SIGKILLed
and restarted, upgraded (SIGUSR1, then started again), away while the engine dies; the
gateway's own graceful restart (SIGHUP: the sockets handed to a new process); systemd's
socket activation (fd 3 and 4 from ``systemd-socket-activate``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from agent_supervisor.record.store import Store
from tests.helpers.gateway_process import _Unix, control, gateway_url, wait  # noqa: F401  (moved; importers use tests.helpers)
from tests.helpers.paths import FAKE_ENGINE, ROOT
from tests.helpers.production import engines, policy_file, start, status

SLOW = ["--tokens", "20", "--token-delay", "0.05"]


def slow_policy(tmp_path: Path) -> Path:
    path = policy_file(tmp_path, recovery={"on_restart": "adopt"})
    data = yaml.safe_load(path.read_text())
    data["engine"]["args"] = [str(FAKE_ENGINE), *SLOW]
    data["modes"] = [{"name": "fast"}, {"name": "safe"}]
    path.write_text(yaml.safe_dump(data))
    return path


def gateway_pid(tmp_path: Path) -> int:
    return int((tmp_path / "state" / "gateway.pid").read_text())


class Agents:
    """Threads sending chat requests through the gateway in turn streamed and not,
    each checked whole (every word of the fake engine, ``[DONE]`` for a stream)."""

    def __init__(self, url: str, n: int = 3) -> None:
        self.url, self.stop = url, threading.Event()
        self.ok = 0
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(n)]
        for t in self.threads:
            t.start()

    def _one(self, client: httpx.Client, stream: bool) -> None:
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
                "stream": stream}
        if not stream:
            r = client.post("/v1/chat/completions", json=body)
            text = r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else ""
            assert r.status_code == 200 and text.split() == [f"w{i}" for i in range(20)], \
                (r.status_code, r.text[:200])
            return
        words, done = [], False
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200, r.status_code
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: {"):
                    for choice in json.loads(line[6:])["choices"]:   # none: usage
                        words += (choice["delta"].get("content") or "").split()
        assert done and words == [f"w{i}" for i in range(20)], (done, words)

    def _run(self, i: int) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            n = i
            while not self.stop.is_set():
                n += 1
                try:
                    self._one(client, stream=n % 2 == 0)
                    self.ok += 1
                except Exception as exc:  # noqa: BLE001 - every failure is the finding
                    self.failures.append(repr(exc))

    def finish(self) -> tuple[int, list[str]]:
        self.stop.set()
        for t in self.threads:
            t.join(90)
        return self.ok, self.failures


def test_issue_14_supervisor_sigkill_restart_and_upgrade_cut_no_agent(tmp_path: Path) -> None:
    path = slow_policy(tmp_path)
    sup = start(path)
    agents = None
    try:
        wait("engine", lambda: status(path)["engine_state"] == "ready")
        (engine,) = engines(path)
        gw = gateway_pid(tmp_path)
        assert (tmp_path / "state" / "gateway.sock").stat().st_mode & 0o777 == 0o600
        agents = Agents(gateway_url(path))
        time.sleep(1.5)
        sup.kill()                                  # SIGKILL: no shutdown at all
        sup.wait()
        time.sleep(2.0)                             # agents go on without a supervisor
        sup = start(path)
        wait("attached again", lambda: status(path)["engine_state"] == "ready")
        assert gateway_pid(tmp_path) == gw and engines(path) == [engine]
        time.sleep(1.0)
        sup.send_signal(signal.SIGUSR1)             # an upgrade: leave engine and gateway
        assert sup.wait(90) == 0
        time.sleep(1.0)
        sup = start(path)                           # "the new build"
        wait("upgraded", lambda: status(path)["engine_state"] == "ready")
        time.sleep(1.0)
        ok, failures = agents.finish()
        agents = None
        assert failures == [] and ok >= 20, (ok, failures[:3])
        assert gateway_pid(tmp_path) == gw and engines(path) == [engine]
        assert status(path)["gateway"]["held"] is False
    finally:
        if agents is not None:
            agents.finish()
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(90) == 0
    # A clean stop of the supervisor stops the gateway it started, and the engine.
    wait("gateway gone", lambda: not Path(f"/proc/{gw}").exists(), timeout=60)
    assert engines(path) == []


def test_issue_14_engine_gone_while_the_supervisor_is_away_requests_wait(
        tmp_path: Path) -> None:
    path = slow_policy(tmp_path)
    sup = start(path)
    try:
        wait("engine", lambda: status(path)["engine_state"] == "ready")
        (engine,) = engines(path)
        sup.kill()
        sup.wait()
        os.killpg(engine, signal.SIGKILL)
        answers: list[int] = []
        asked = threading.Thread(target=lambda: answers.append(httpx.post(
            gateway_url(path) + "/v1/completions", timeout=60,
            json={"model": "fake-model", "prompt": "hi"}).status_code))
        asked.start()
        time.sleep(1.5)                             # held: no engine, no supervisor
        assert answers == []
        sup = start(path)
        asked.join(60)
        assert answers == [200]
        store = Store.open(f"sqlite:///{tmp_path}/state/supervisor.db", fleet="prod")
        resent = wait("resumption record", lambda: store.incidents(kind="stream_resumed"))
        store.close()
        assert resent[0].findings[0]["continuation"] == "whole"
        assert resent[0].findings[0]["path"] == "/v1/completions"
    finally:
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(90) == 0


@pytest.fixture
def engine_and_policy(tmp_path: Path):
    path = slow_policy(tmp_path)
    port = yaml.safe_load(path.read_text())["engine"]["port"]
    eng = subprocess.Popen([sys.executable, str(FAKE_ENGINE), "--port", str(port),
                            "--ready-after", "0", "--no-core", *SLOW],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (tmp_path / "state").mkdir(mode=0o700)
    yield path
    eng.kill()
    eng.wait()


def test_issue_14_gateway_hands_its_sockets_over_on_sighup(tmp_path: Path,
                                                          engine_and_policy: Path) -> None:
    path, state = engine_and_policy, tmp_path / "state"
    with open(tmp_path / "gateway.log", "ab") as log:
        first = subprocess.Popen([sys.executable, "-m", "agent_supervisor", "gateway", "--policy",
                                  str(path)], cwd=ROOT, stderr=log)
    wait("control", lambda: control(state, "GET", "/control/state")[0] == 200)
    assert control(state, "POST", "/control/release", {"rung": 1})[0] == 200
    agents = Agents(gateway_url(path), n=4)
    try:
        time.sleep(1.0)
        first.send_signal(signal.SIGHUP)
        second = wait("successor", lambda: gateway_pid(tmp_path) != first.pid
                      and gateway_pid(tmp_path))
        assert first.wait(90) == 0                  # it drained its requests and left
        time.sleep(1.5)
        ok, failures = agents.finish()
        assert failures == [] and ok >= 10, (ok, failures[:3])
        now = control(state, "GET", "/control/state")[1]
        assert (now["pid"], now["rung"], now["held"]) == (second, 1, False)
    finally:
        agents.finish()
        os.kill(gateway_pid(tmp_path), signal.SIGTERM)
    wait("successor gone", lambda: not Path(f"/proc/{second}").exists(), timeout=60)


ACTIVATE = shutil.which("systemd-socket-activate")


@pytest.mark.skipif(ACTIVATE is None, reason="systemd-socket-activate not installed")
def test_issue_14_socket_activation_gives_the_gateway_its_sockets(
        tmp_path: Path, engine_and_policy: Path) -> None:
    path, state = engine_and_policy, tmp_path / "state"
    port = yaml.safe_load(path.read_text())["gateway"]["port"]
    with open(tmp_path / "gateway.log", "ab") as log:
        proc = subprocess.Popen([ACTIVATE, "-l", f"127.0.0.1:{port}", "-l",
                                 str(state / "gateway.sock"), sys.executable, "-m",
                                 "agent_supervisor", "gateway", "--policy", str(path)],
                                cwd=ROOT, stderr=log)
    try:
        # The first connection (the supervisor's, to the control socket) starts it.
        got = wait("activated", lambda: control(state, "GET", "/control/state")[1])
        assert got["owner"] == "external" and got["held"] is True
        control(state, "POST", "/control/release", {"rung": 0})
        r = httpx.post(gateway_url(path) + "/v1/completions", timeout=30,
                       json={"model": "fake-model", "prompt": "hi"})
        assert r.status_code == 200
        assert f"127.0.0.1:{port}" in " ".join(
            f"{c.laddr.ip}:{c.laddr.port}" for c in psutil.Process(
                got["pid"]).net_connections() if c.status == "LISTEN")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0


def test_issue_14_a_second_gateway_on_one_state_directory_exits_2(
        tmp_path: Path, engine_and_policy: Path) -> None:
    path = engine_and_policy
    first = subprocess.Popen([sys.executable, "-m", "agent_supervisor", "gateway", "--policy",
                              str(path)], cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        wait("control", lambda: control(tmp_path / "state", "GET",
                                        "/control/state")[0] == 200)
        second = subprocess.run([sys.executable, "-m", "agent_supervisor", "gateway", "--policy",
                                 str(path)], cwd=ROOT, capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 2
        assert "another gateway answers on" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(90) == 0

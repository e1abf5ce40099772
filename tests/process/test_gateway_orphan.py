"""Issue 14, item 2: a gateway its supervisor started must not outlive the supervisor's
state directory. Real gateway processes (``supervisor gateway``) in front of the fake
engine (a real HTTP server): the owned one drains a stream in flight and exits 0 once its
state directory is removed (the engine SIGSTOPped meanwhile, so that the stream is
surely in flight when the gateway notices); systemd's (``--owner external``), on a state directory
removed the same way, keeps serving; with ``orphan_timeout_seconds`` an owned gateway no
supervisor speaks to exits by itself. A gateway outliving a supervisor's SIGKILL and
restart is tests/process/test_gateway_process.py's first test."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.helpers.gateway_process import control, gateway_url, wait
from tests.helpers.paths import FAKE_ENGINE, ROOT
from tests.helpers.production import policy_file

WORDS = 12
SLOW = ["--tokens", str(WORDS), "--token-delay", "0.1"]


def _policy(base: Path, port: int, **gateway: object) -> Path:
    base.mkdir()
    path = policy_file(base, gateway=gateway)
    data = yaml.safe_load(path.read_text())
    data["engine"]["port"] = port
    path.write_text(yaml.safe_dump(data))
    (base / "state").mkdir(mode=0o700)
    return path


def _gateway(path: Path, owner: str) -> subprocess.Popen[bytes]:
    with open(path.with_name("gateway.log"), "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "agent_supervisor", "gateway", "--policy",
                                 str(path), "--owner", owner], cwd=ROOT, stderr=log)
    state = path.parent / "state"
    wait("control", lambda: control(state, "GET", "/control/state")[0] == 200)
    assert control(state, "POST", "/control/release", {"rung": 0})[0] == 200
    return proc


@pytest.fixture
def engine(tmp_path: Path):
    port = yaml.safe_load(policy_file(tmp_path).read_text())["engine"]["port"]
    eng = subprocess.Popen([sys.executable, str(FAKE_ENGINE), "--port", str(port),
                            "--ready-after", "0", "--no-core", *SLOW],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait("engine", lambda: httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200)
    yield eng, port
    eng.send_signal(signal.SIGCONT)
    eng.kill()
    eng.wait()


def _words(url: str) -> tuple[list[str], bool]:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
            "stream": True}
    words, done = [], False
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    words += (choice["delta"].get("content") or "").split()
    return words, done


def test_issue_14_owned_gateway_drains_and_exits_when_its_state_directory_is_gone(
        tmp_path: Path, engine: tuple[subprocess.Popen[bytes], int]) -> None:
    engine_proc, port = engine
    owned_path = _policy(tmp_path / "owned", port)
    external_path = _policy(tmp_path / "external", port)
    owned = _gateway(owned_path, "supervisor")
    external = _gateway(external_path, "external")
    try:
        url = gateway_url(owned_path)
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
                "stream": True}
        words, done = [], False
        with httpx.stream("POST", url + "/v1/chat/completions", json=body,
                          timeout=60) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            for line in lines:                  # the stream has begun
                if line.startswith("data: {"):
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    words += (delta.get("content") or "").split()
                    break
            engine_proc.send_signal(signal.SIGSTOP)  # the stream cannot end meanwhile
            # Both supervisors' state directories go (an uninstall, a tmp cleaner).
            shutil.rmtree(owned_path.parent / "state")
            shutil.rmtree(external_path.parent / "state")
            log = owned_path.with_name("gateway.log")
            wait("owned gateway stopping", lambda: "control socket's path is gone"
                 in log.read_text())
            assert owned.poll() is None        # draining this stream
            engine_proc.send_signal(signal.SIGCONT)
            for line in lines:
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: {"):
                    for choice in json.loads(line[6:])["choices"]:
                        words += (choice["delta"].get("content") or "").split()
        assert done and words == [f"w{i}" for i in range(WORDS)], (done, words)
        assert owned.wait(60) == 0
        # systemd's gateway, whose directory went at the same moment, still serves.
        assert external.poll() is None
        assert _words(gateway_url(external_path)) == ([f"w{i}" for i in range(WORDS)],
                                                      True)
        assert external.poll() is None
    finally:
        for proc in (owned, external):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(60)


def test_issue_14_owned_gateway_no_supervisor_speaks_to_exits_after_the_bound(
        tmp_path: Path, engine: tuple[subprocess.Popen[bytes], int]) -> None:
    path = _policy(tmp_path / "owned", engine[1], orphan_timeout_seconds=2)
    proc = _gateway(path, "supervisor")
    try:
        assert proc.wait(60) == 0
        assert "no supervisor spoke on its control socket" in path.with_name(
            "gateway.log").read_text()
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)


def test_issue_14_requests_held_by_an_orphaned_gateway_get_a_503_at_once(
        tmp_path: Path, engine: tuple[subprocess.Popen[bytes], int]) -> None:
    """Held for a switch no supervisor will end: refused at once, not after the drain
    timeout (30 s here) or the hold timeout."""
    path = _policy(tmp_path / "owned", engine[1], drain_timeout_seconds=30)
    proc = _gateway(path, "supervisor")
    state = path.parent / "state"
    try:
        assert control(state, "POST", "/control/hold", {"reason": "switch"})[0] == 200
        with httpx.Client(timeout=60) as c:
            body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
            result: list[httpx.Response] = []
            sender = threading.Thread(target=lambda: result.append(
                c.post(gateway_url(path) + "/v1/chat/completions", json=body)))
            sender.start()
            wait("the request held", lambda: control(state, "GET", "/control/state")[1]
                 .get("load", {}).get("requests_queued") == 1)
            t0 = time.monotonic()
            shutil.rmtree(state)
            sender.join(60)
            took = time.monotonic() - t0
        (r,) = result
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "gateway_stopping"
        assert r.headers["retry-after"] == "5"
        print(f"held request refused {took:.1f} s after the state directory went")
        assert took < 25                     # the drain timeout is 30 s
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)

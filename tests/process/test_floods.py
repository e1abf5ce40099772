"""Issue 34's acceptance for the listeners: under each flood (slow headers, slow bodies,
a 200 MiB header, 1,100 connections) against each listener (the gateway, the admin API,
the node agent), each process started as in production and under ``ulimit -n 1024``
(``RLIMIT_NOFILE``, systemd's default ``LimitNOFILE``), an agent with a key is still
served, the supervisor's tick and its watchdog ping go on (the node agent's sampler), and
the listener's RSS grows by less than 50 MiB. Before: 520 slow bodies locked every agent
out of the gateway, a 200 MiB header grew the admin API by ~400 MiB and the node agent by
~320 MiB, and 1,100 slow connections stopped every tick."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from tests.helpers.flood import CHAT_BODY, FloodResult, flood
from tests.helpers.paths import FAKE_ENGINE, ROOT
from tests.helpers.ports import free_ports

KEY = "agent-key-of-the-flood-test"
TOKEN = "node-agent-token-of-the-flood-test"
RSS_LIMIT = 50 * 2**20
KINDS = ("slow_headers", "slow_bodies", "big_header", "many_connections")
#: Where each test leaves its figures (the README's reliability section quotes them).
FIGURES = Path(os.environ.get("SUPERVISOR_FLOOD_FIGURES", "/tmp/issue34-floods.json"))


def _nofile_1024() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def _wait(check, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, OSError, KeyError, ValueError):
            if check():
                return
        time.sleep(0.3)
    raise AssertionError("did not start")


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Pings:
    """The watchdog pings (``WATCHDOG=1``) the supervisor sends to ``$NOTIFY_SOCKET``."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                if b"WATCHDOG=1" in self.sock.recv(4096):
                    self.times.append(time.monotonic())

    def longest_gap(self, since: float) -> float:
        """The longest time without a ping since ``since``, up to now."""
        marks = [since] + [t for t in self.times if t >= since] + [time.monotonic()]
        return max(b - a for a, b in itertools.pairwise(marks))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """``supervisor run`` (its gateway in its own process) on the stand-in engine."""
    tmp = tmp_path_factory.mktemp("flood")
    engine, gateway, admin = free_ports(3)
    policy = tmp / "p.yaml"
    policy.write_text(yaml.safe_dump({
        "fleet": "flood", "engine": {"executable": sys.executable, "port": engine,
                                     "args": [str(FAKE_ENGINE), "--no-core"],
                                     "shutdown_timeout_seconds": 1},
        "modes": [{"name": "only"}], "storage": {"state_directory": str(tmp / "s")},
        "sampling": {"tick_seconds": 0.5, "kernel_log": False},
        "gateway": {"port": gateway, "auth": "keys", "header_timeout_seconds": 3,
                    "body_timeout_seconds": 3, "api_keys": [
                        {"name": "agent", "sha256": hashlib.sha256(KEY.encode()).hexdigest()}]},
        "admin": {"port": admin}}))
    pings = Pings(tmp / "notify")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NOTIFY_SOCKET": str(tmp / "notify"),
           "WATCHDOG_USEC": "5000000"}
    with open(tmp / "service.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "agent_supervisor", "run", "--policy",
                                 str(policy)], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_nofile_1024)
    try:
        _wait(lambda: httpx.get(f"http://127.0.0.1:{gateway}/gateway/health").json()[
            "engine_ready"])
        children = psutil.Process(proc.pid).children()
        gw_pid = next(c.pid for c in children if "gateway" in c.cmdline())
        yield {"proc": proc, "gateway": gateway, "admin": admin, "gw_pid": gw_pid,
               "pings": pings, "log": tmp / "service.log"}
    finally:
        _stop(proc)
        pings.close()


def _keyed_chat(port: int) -> str | None:
    try:
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", content=CHAT_BODY,
                       headers={"Authorization": f"Bearer {KEY}",
                                "Content-Type": "application/json"}, timeout=5)
    except httpx.HTTPError as exc:
        return repr(exc)
    return None if r.status_code == 200 else f"{r.status_code} {r.text[:100]}"


def _status(port: int) -> str | None:
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/api/status", timeout=5)
    except httpx.HTTPError as exc:
        return repr(exc)
    if r.status_code != 200:
        return f"{r.status_code} {r.text[:100]}"
    ago = r.json()["last_decision_seconds_ago"]
    return None if ago is not None and ago < 3 else f"last decision {ago} s ago"


def _record(listener: str, results: dict[str, FloodResult], **more: float) -> None:
    figures = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    figures[listener] = {k: {"probes": r.probes, "served": r.served,
                             "slowest_seconds": round(r.slowest_seconds, 2),
                             "rss_growth_mib": round(r.rss_growth_bytes / 2**20, 1)}
                         for k, r in results.items()}
    figures[listener].update(more)
    FIGURES.write_text(json.dumps(figures, indent=1))


def _check(results: dict[str, FloodResult]) -> None:
    for kind, r in results.items():
        assert r.probes >= 3 and r.served == r.probes, (kind, r.failures[:3])
        assert r.rss_growth_bytes < RSS_LIMIT, (kind, r.rss_growth_bytes / 2**20)


@pytest.mark.parametrize("listener", ["gateway", "admin"])
def test_issue_34_floods_against_the_service_leave_agents_served_and_ticks_going(
        service: dict, listener: str) -> None:
    port = service[listener]
    pid = service["gw_pid"] if listener == "gateway" else service["proc"].pid
    results, t0 = {}, time.monotonic()
    for kind in KINDS:
        results[kind] = flood(("127.0.0.1", port), kind, pid=pid, probe=lambda: (
            _keyed_chat(service["gateway"]) or _status(service["admin"])))
    gap = service["pings"].longest_gap(t0)
    _record(listener, results, longest_watchdog_gap_seconds=round(gap, 2))
    _check(results)
    assert gap < 3.0                                  # the watchdog ping went on
    assert service["proc"].poll() is None


@pytest.fixture(scope="module")
def node_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """``supervisor agent`` for the worker node of a two-node policy."""
    tmp = tmp_path_factory.mktemp("agent")
    (tmp / "agent.token").write_text(TOKEN + "\n")
    engine, port, admin = free_ports(3)
    policy = tmp / "pair.yaml"
    policy.write_text(yaml.safe_dump({
        "fleet": "pair", "engine": {
            "executable": sys.executable, "args": [str(FAKE_ENGINE)], "port": engine,
            "nodes": [{"name": "spark-1", "address": "127.0.0.1"},
                      {"name": "spark-2", "address": "127.0.0.2", "agent_port": port}],
            "distributed": {"agent_token_file": "agent.token", "sample_seconds": 0.2}},
        "modes": [{"name": "fast"}], "gateway": {"enabled": False}, "admin": {"port": admin},
        "sampling": {"kernel_log": False}, "storage": {"state_directory": str(tmp / "s")}}))
    with open(tmp / "agent.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "agent_supervisor", "agent", "--policy",
                                 str(policy), "--node", "spark-2"], cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_nofile_1024)
    try:
        _wait(lambda: _sample(port) is None)
        yield {"proc": proc, "port": port}
    finally:
        _stop(proc)


def _sample(port: int) -> str | None:
    try:
        r = httpx.get(f"http://127.0.0.2:{port}/v1/node/sample", timeout=5,
                      headers={"Authorization": f"Bearer {TOKEN}"})
    except httpx.HTTPError as exc:
        return repr(exc)
    if r.status_code != 200:
        return f"{r.status_code} {r.text[:100]}"
    sample = r.json()["sample"] or {}
    age = r.json()["agent_wall_s"] - (sample.get("wall_s") or 0)
    return None if age < 2 else f"the node's sample is {age:.1f} s old"


def test_issue_34_floods_against_the_node_agent_leave_the_head_served(
        node_agent: dict) -> None:
    port = node_agent["port"]
    results = {kind: flood(("127.0.0.2", port), kind, pid=node_agent["proc"].pid,
                           probe=lambda: _sample(port)) for kind in KINDS}
    _record("node_agent", results)
    _check(results)
    assert node_agent["proc"].poll() is None

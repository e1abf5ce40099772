"""The ``supervisor`` command as an operator types it: exit codes, messages, a real
``run`` stopped by a real SIGTERM, and the record views."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.helpers.cli import cli_policy, sup
from tests.helpers.paths import FAKE_ENGINE, ROOT
from tests.helpers.ports import free_port


def test_policy_check_prints_the_ladder() -> None:
    out = sup("policy", "check", "policies/cpu-demo.yaml")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "valid policy for fleet 'cpu-demo', 4 modes" in lines[0]
    assert any(line.split()[:3] == ["0*", "mtp2", "-"] for line in lines)
    assert any(line.split()[:3] == ["3", "safe", "yes"] for line in lines)


def test_bad_policy_exits_2_naming_file_field_and_value(tmp_path: Path) -> None:
    bad = tmp_path / "fleet.yaml"
    bad.write_text("fleet: f\nengine: {executable: vllm}\nmodes:\n"
                   "  - {name: a, args: {--gpu-memory-utilization: 1.5}}\n")
    out = sup("policy", "check", str(bad))
    assert out.returncode == 2
    assert f"{bad}: modes[0].args: --gpu-memory-utilization must be a fraction in (0, 1], " \
           "got 1.5" in out.stderr


def test_run_with_a_bad_policy_exits_2_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("fleet: f\n")
    out = sup("run", "--policy", str(bad))
    assert out.returncode == 2 and "engine: Field required" in out.stderr


def test_version() -> None:
    out = sup("--version")
    assert out.returncode == 0 and out.stdout.strip() == "supervisor 0.1.0"


def test_run_until_sigterm_then_show_the_records(tmp_path: Path) -> None:
    # Free ports, never the default listeners (8080, 8081): they may be taken (issue 18).
    policy = cli_policy(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "agent_supervisor", "run", "--policy",
                             str(policy)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        runs = sup("runs", "--policy", str(policy), "--json")
        if runs.returncode == 0 and json.loads(runs.stdout or "[]") and \
                json.loads(runs.stdout)[0]["ready_at"]:
            break
        time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "supervisor stopping: SIGTERM received" in err
    assert "ready -> stopping (supervisor shutting down)" in err
    (run,) = json.loads(sup("runs", "--policy", str(policy), "--json").stdout)
    assert run["outcome"] == "stopped" and run["planned_stop"] is True
    assert run["argv"][1] == str(FAKE_ENGINE)
    table = sup("runs", "--policy", str(policy)).stdout.splitlines()
    assert table[0].split()[:2] == ["run", "mode"] and "stopped" in table[1]
    assert sup("incidents", "--policy", str(policy), "--json").stdout.strip() == "[]"


def test_sample_prints_the_engine_and_the_box(tmp_path: Path) -> None:
    port = free_port()
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump({
        "fleet": "cli", "engine": {"executable": "vllm", "port": port},
        "modes": [{"name": "only"}], "storage": {"state_directory": str(tmp_path / "s")},
    }))
    engine = subprocess.Popen([sys.executable, str(FAKE_ENGINE), "--port", str(port),
                               "--metrics", "draft.busy.metrics.txt"],
                              stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            one = sup("sample", "--policy", str(policy))
            sample = json.loads(one.stdout)
            if sample["engine_state"] == "ready" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert one.returncode == 0, one.stderr
        assert sample["engine_pid"] == engine.pid and sample["health_status"] == 200
        assert sample["spec_decode_accepted_per_position_total"] == [1115.0, 522.0, 391.0]
        assert sample["mem_available_bytes"] > 0 and sample["gpu_temperature_c"] is None
        assert "no GPU telemetry" in one.stderr
        watch = sup("sample", "--policy", str(policy), "--watch", "--count", "3",
                    "--interval", "0.1")
        lines = watch.stdout.splitlines()
        assert len(lines) == 3 and all(json.loads(x)["engine_state"] == "ready" for x in lines)
        assert watch.stderr.count("no GPU telemetry") == 1
    finally:
        os.killpg(engine.pid, signal.SIGKILL)
        engine.wait()


def wait_ready(policy: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = sup("runs", "--policy", str(policy), "--json")
        if runs.returncode == 0 and json.loads(runs.stdout or "[]") and \
                json.loads(runs.stdout)[0]["ready_at"]:
            return
        time.sleep(0.3)
    raise AssertionError("the engine did not become ready")


def test_issue_18_a_busy_listener_port_exits_2_and_leaves_a_clean_stop(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        policy = cli_policy(tmp_path, admin={"port": port})
        out = sup("run", "--policy", str(policy))
    assert out.returncode == 2, out.stderr
    assert f"admin API could not listen on 127.0.0.1:{port}" in out.stderr
    assert "Traceback" not in out.stderr
    (life,) = json.loads(sup("export", "--what", "services", "--format", "json",
                             "--policy", str(policy)).stdout)
    assert life["stopped_at"] is not None and life["exit_code"] == 2
    assert sup("incidents", "--policy", str(policy), "--json").stdout.strip() == "[]"


def test_issue_18_a_second_run_on_one_policy_exits_2_naming_the_holder(tmp_path: Path) -> None:
    policy = cli_policy(tmp_path)
    first = subprocess.Popen([sys.executable, "-m", "agent_supervisor", "run", "--policy",
                              str(policy)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(policy)
        second = sup("run", "--policy", str(policy))
        assert second.returncode == 2, second.stderr
        assert f"another supervisor (pid {first.pid}) already runs" in second.stderr
        assert first.poll() is None                       # the first is untouched
        # Nothing recorded: one life, one run, no incident (no false unclean stop).
        lives = json.loads(sup("export", "--what", "services", "--format", "json",
                               "--policy", str(policy)).stdout)
        assert [life["pid"] for life in lives] == [first.pid]
        assert len(json.loads(sup("runs", "--policy", str(policy), "--json").stdout)) == 1
        assert sup("incidents", "--policy", str(policy), "--json").stdout.strip() == "[]"
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=30)
    assert first.returncode == 0, err


def test_issue_12_replay_a_closed_loop_scenario() -> None:
    scenario = ROOT / "tests" / "fixtures" / "scenarios" / "survivors_after_sigkill.yaml"
    out = sup("replay", "--scenario", str(scenario), "--policy",
              str(ROOT / "policies" / "cpu-demo.yaml"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any("reboot_required" in ln and "survive SIGKILL" in ln for ln in lines)
    bad = sup("replay", "--scenario", str(ROOT / "README.md"), "--policy",
              str(ROOT / "policies" / "cpu-demo.yaml"))
    assert bad.returncode == 2 and "README.md" in bad.stderr
    assert sup("replay", "--policy", str(ROOT / "policies" / "cpu-demo.yaml")).returncode == 2


def test_a_database_first_created_by_a_record_view_is_private(tmp_path: Path) -> None:
    """Only ``run`` sets umask 077; a view run first under umask 022 used to create the
    incident database 0644, readable by every user on the box."""
    policy = tmp_path / "p.yaml"
    state = tmp_path / "s"
    policy.write_text(yaml.safe_dump({
        "fleet": "cli", "engine": {"executable": sys.executable, "args": [str(FAKE_ENGINE)]},
        "modes": [{"name": "only"}], "storage": {"state_directory": str(state)}}))
    out = sup("incidents", "--policy", str(policy), "--json",
              preexec_fn=lambda: os.umask(0o022))
    assert out.returncode == 0, out.stderr
    made = [p for p in state.rglob("*") if p.is_file()]
    assert any(p.suffix == ".db" for p in made), made
    for p in made:
        assert p.stat().st_mode & 0o777 == 0o600, (p, oct(p.stat().st_mode))
    assert state.stat().st_mode & 0o777 == 0o700

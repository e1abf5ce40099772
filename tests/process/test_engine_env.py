"""What the real engine process gets (issue 17): its environment from an allow-list (the
planted secrets are grepped in its /proc/<pid>/environ), a TMPDIR nobody can guess or
pre-create, private files, and a spawn that runs out of descriptors recorded as the
box's fault, not the mode's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from agent_supervisor.act.engine_env import find_run_tmp_dirs
from agent_supervisor.states import CrashReason, EngineState
from tests.helpers.launcher import launcher_for
from tests.helpers.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
PLANTED = {
    "SUPERVISOR_ADMIN_TOKEN": "planted-admin-token-1a2b",
    "UPSTREAM_KEY": "planted-upstream-key-3c4d",
    "HF_TOKEN": "planted-hf-token-5e6f",
    "AWS_SECRET_ACCESS_KEY": "planted-aws-7a8b",
    "DATABASE_PASSWORD": "planted-db-9c0d",
    "VLLM_SERVER_DEV_MODE": "1",
    "SOME_UNRELATED_VARIABLE": "planted-unrelated-e1f2",
}


def environ_of(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


async def test_issue_17_the_engine_environment_is_an_allow_list(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")          # a vLLM setting: inherited
    key_file = tmp_path / "engine.key"
    key_file.write_text("planted-engine-key-aa11\n")
    launcher, _ = launcher_for(
        tmp_path, gateway={"upstream_api_key_env": "UPSTREAM_KEY"},
        engine={"environment": {"EXPLICIT": "yes"}, "api_key_file": str(key_file)})
    run = await launcher.start(rung=0)
    try:
        await wait_for(lambda: launcher.state is EngineState.READY, what="ready")
        env = environ_of(run.pid)
        for name, value in PLANTED.items():
            assert f"{name}=".encode() not in env, name
            assert len(value) < 4 or value.encode() not in env, name
        entries = dict(e.split(b"=", 1) for e in env.split(b"\0") if b"=" in e)
        assert entries[b"VLLM_CPU_KVCACHE_SPACE"] == b"1" and entries[b"EXPLICIT"] == b"yes"
        assert entries[b"PATH"] and entries[b"TMPDIR"] == str(run.tmp_dir).encode()
        # The engine's key reaches it as VLLM_API_KEY, never in its argv (ps shows argv).
        assert entries[b"VLLM_API_KEY"] == b"planted-engine-key-aa11"
        assert b"planted-engine-key" not in Path(f"/proc/{run.pid}/cmdline").read_bytes()
        # TMPDIR: made by mkdtemp (random suffix), 0700, ours; the log file 0600.
        assert run.tmp_dir.name.startswith(f"vllm-sup-{run.run_id}-")
        assert len(run.tmp_dir.name) == len(f"vllm-sup-{run.run_id}-") + 8
        assert run.tmp_dir.stat().st_mode & 0o777 == 0o700
        assert run.log_path.stat().st_mode & 0o777 == 0o600
        assert len(str(run.tmp_dir)) + 37 <= 107
    finally:
        await launcher.stop()
        await launcher.close()


async def test_issue_17_dev_mode_only_when_the_policy_sets_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    launcher, _ = launcher_for(tmp_path, engine={"environment": {"VLLM_SERVER_DEV_MODE": "0"}})
    run = await launcher.start(rung=0)
    try:
        await wait_for(lambda: launcher.state is EngineState.READY, what="ready")
        assert b"VLLM_SERVER_DEV_MODE=0\0" in environ_of(run.pid)
    finally:
        await launcher.stop()
        await launcher.close()


def test_issue_17_another_users_tmpdir_is_never_taken(tmp_path: Path) -> None:
    """A directory named like a run's TMPDIR but owned by someone else (root can chown
    here) is neither adopted nor removed."""
    launcher, _ = launcher_for(tmp_path)
    foreign = Path(tempfile.gettempdir()) / "vllm-sup-20261201T000000-abcd-planted"
    foreign.mkdir(exist_ok=True)
    try:
        os.chown(foreign, 65534, 65534)
        assert find_run_tmp_dirs(launcher.policy, "20261201T000000-abcd") == []
    finally:
        foreign.rmdir()


async def test_issue_17_a_state_tmp_owned_by_another_user_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))   # short: a usable base
    try:
        os.chown(runtime, 65534, 65534)
        monkeypatch.setenv("RUNTIME_DIRECTORY", str(runtime))
        launcher, _ = launcher_for(tmp_path)
        run = await launcher.start(rung=0)
        assert run.crash_reason is CrashReason.SPAWN_FAILED
        assert "owned by uid 65534" in run.error and not list(runtime.iterdir())
        await launcher.close()
    finally:
        runtime.rmdir()


_EMFILE = textwrap.dedent("""
    import asyncio, os, resource, sys
    from pathlib import Path
    from agent_supervisor.act.launcher import EngineLauncher
    from tests.helpers.policies import fake_engine_policy

    async def main():
        policy = fake_engine_policy(Path(sys.argv[1]))
        launcher = EngineLauncher(policy)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        run = await launcher.start(rung=0)
        for fd in held:
            os.close(fd)
        print(run.crash_reason, run.error)
        await launcher.close()

    asyncio.run(main())
""")


def test_issue_17_a_spawn_out_of_descriptors_is_the_boxs_fault(tmp_path: Path) -> None:
    """A real EMFILE (RLIMIT_NOFILE 64, every descriptor taken) at spawn."""
    out = subprocess.run([sys.executable, "-c", _EMFILE, str(tmp_path)], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    reason, _, error = out.stdout.strip().partition(" ")
    assert reason == "spawn_resources", out.stdout
    assert "Too many open files" in error

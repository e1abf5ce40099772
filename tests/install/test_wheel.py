"""Issue 28: the wheel installed into a fresh virtual environment works with no checkout:
README.md's "Install on a Spark" commands, then ``run`` against the stand-in engine until
ready, a crash and its incident, ``incidents``, ``status``, ``systemd-unit``,
``install --root``, the dashboard page, the Grafana dashboard and the alert rules.

The environment is ``python -m venv`` plus ``pip install WHEEL`` with its dependencies from
pip's index, as ``pipx install`` makes it (14 s here: far under the minute that would
have justified borrowing the development venv's packages). Every command runs from a
directory of its own with no PYTHONPATH; the stand-in engine (tests/helpers/fake_engine.py)
and its recorded scrape are copied there first, so nothing is read from the checkout.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from agent_supervisor.commands.install import _closed_to_others
from tests.helpers.install import PIP_TIMEOUT_S, clean_env, make_venv, run, site_packages
from tests.helpers.paths import FAKE_ENGINE, FIXTURES, ROOT
from tests.helpers.ports import free_ports

#: README.md's "Install on a Spark" as this test runs it: ``{root}`` is empty on a real
#: box (``install`` also gets ``--root`` here).
README_STEPS = (
    "supervisor policy init --from gb10-nvfp4-mtp --output {root}/etc/agent-supervisor/spark.yaml",
    "supervisor policy check {root}/etc/agent-supervisor/spark.yaml",
    "supervisor install --policy {root}/etc/agent-supervisor/spark.yaml",
)
#: What the wheel must carry besides code: every file the service or a command reads.
DATA = ("data/migrations/env.py", "data/migrations/script.py.mako",
        "data/migrations/versions/0001_engine_runs_incidents_transitions.py",
        "data/dashboards/supervisor.json", "data/dashboards/alerts/supervisor.rules.yml",
        "data/dashboards/alerts/supervisor.rules.test.yml",
        "data/policies/policy.schema.json", "data/policies/gb10-nvfp4-mtp.yaml",
        "show/static/index.html", "show/static/vendor/uplot/uPlot.iife.min.js")


class Installed:
    """The fresh environment and a working directory of its own."""

    def __init__(self, venv: Path, work: Path) -> None:
        self.venv, self.work, self.env = venv, work, clean_env(venv)
        self.exe = venv / "bin" / "supervisor"

    def sup(self, *args: str | Path, ok: bool = True) -> subprocess.CompletedProcess:
        if ok:
            return run([self.exe, *args], cwd=self.work, env=self.env)
        return subprocess.run([str(self.exe), *map(str, args)], cwd=self.work, env=self.env,
                              capture_output=True, text=True, timeout=120)

    def json(self, *args: str | Path) -> object:
        return json.loads(self.sup(*args).stdout)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    venv = make_venv(tmp_path_factory.mktemp("installed") / "venv")
    run([venv / "bin" / "python", "-m", "pip", "install", "-q", wheel], cwd=venv.parent,
        env=clean_env(venv), timeout=PIP_TIMEOUT_S)
    return Installed(venv, tmp_path_factory.mktemp("work"))


def test_issue_28_the_wheel_carries_every_file_read_at_run_time(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"agent_supervisor/{d}" for d in DATA} <= names
    assert {n.split("/")[0] for n in names} == {"agent_supervisor",
                                                f"{wheel.name.split('-py3')[0]}.dist-info"}
    # The links in the repository became real files with the source's content.
    info = zipfile.ZipFile(wheel).getinfo("agent_supervisor/data/migrations/env.py")
    assert info.external_attr >> 28 != 0o12                    # not a symlink entry
    assert zipfile.ZipFile(wheel).read(info) == (ROOT / "migrations" / "env.py").read_bytes()


def test_issue_28_installed_package_is_the_wheels(installed: Installed) -> None:
    out = run([installed.venv / "bin" / "python", "-c",
               "import agent_supervisor.resources as r; print(r.__file__); "
               "print(r.migrations_dir()); print(r.static_dir())"],
              cwd=installed.work, env=installed.env).stdout.split()
    site = site_packages(installed.venv)
    assert all(Path(p).is_relative_to(site) for p in out), out
    assert not Path(out[1]).is_symlink() and (Path(out[1]) / "versions").is_dir()
    assert installed.sup("--version").stdout.strip() == "supervisor 0.1.0"


def test_issue_28_readme_install_steps(installed: Installed, tmp_path: Path) -> None:
    root = tmp_path / "root"
    init, check, install = (s.format(root=root).split()[1:] for s in README_STEPS)
    out = installed.sup(*init)
    assert "wrote" in out.stdout
    policy = root / "etc" / "agent-supervisor" / "spark.yaml"
    assert policy.read_text() == (ROOT / "policies" / "gb10-nvfp4-mtp.yaml").read_text()
    again = installed.sup(*init, ok=False)
    assert again.returncode == 1 and "exists; --force replaces it" in again.stderr
    out = installed.sup(*check)
    assert "valid policy for fleet 'spark-coding-agents'" in out.stdout
    out = installed.sup(*install, "--root", root)
    assert "skipped (--root): systemctl enable --now agent-supervisor-spark-coding-agents" \
        in out.stdout
    unit = (root / "etc/systemd/system/agent-supervisor-spark-coding-agents.service").read_text()
    assert (f"ExecStart={installed.venv}/bin/supervisor run --policy "
            "/etc/agent-supervisor/spark.yaml\n") in unit
    assert "StateDirectory=agent-supervisor\n" in unit
    assert (root / "var/lib/agent-supervisor").is_dir()
    closed = _closed_to_others(installed.exe)          # pytest's tmp is 0700 here
    assert ("warning:" in out.stdout) == (closed is not None), out.stdout
    names = installed.sup("policy", "init", "--list").stdout.split()
    assert {"cpu-demo", "gb10-nvfp4-mtp", "gb10-llamacpp"} <= set(names)
    bad = installed.sup("policy", "init", "--from", "nope", ok=False)
    assert bad.returncode == 2 and "the examples: cpu-demo, " in bad.stderr


def test_issue_28_readme_names_the_steps_as_run() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Install on a Spark", 1)[1].split("\n## ", 1)[0]
    for step in README_STEPS:
        assert step.format(root="") in section, step


def test_issue_28_dashboards_alert_rules_schema(installed: Installed) -> None:
    grafana, rules = installed.work / "grafana", installed.work / "rules"
    installed.sup("dashboards", "--output", grafana)
    installed.sup("alert-rules", "--output", rules)
    assert (grafana / "supervisor.json").read_text() == \
        (ROOT / "dashboards" / "supervisor.json").read_text()
    for name in ("supervisor.rules.yml", "supervisor.rules.test.yml"):
        assert (rules / name).read_text() == (ROOT / "dashboards" / "alerts" / name).read_text()
    assert json.loads(installed.sup("dashboards").stdout)["uid"] == "agent-serving-supervisor"
    assert "groups:" in installed.sup("alert-rules").stdout
    assert installed.sup("policy", "schema").stdout == \
        (ROOT / "policies" / "policy.schema.json").read_text()


def _stand_in(work: Path) -> Path:
    """The stand-in engine and the scrape it serves, copied beside the policy."""
    engine = work / "engine" / "helpers" / "fake_engine.py"
    engine.parent.mkdir(parents=True)
    shutil.copy2(FAKE_ENGINE, engine)
    scrapes = work / "engine" / "fixtures" / "vllm" / "0.32.0"
    scrapes.mkdir(parents=True)
    shutil.copy2(FIXTURES / "vllm" / "0.32.0" / "mimo-mtp2.metrics.txt", scrapes)
    return engine


def _policy(installed: Installed) -> tuple[Path, int]:
    engine_port, gateway_port, admin_port = free_ports(3)
    policy = installed.work / "stand-in.yaml"
    policy.write_text(yaml.safe_dump({
        "fleet": "wheel",
        "engine": {"executable": str(installed.venv / "bin" / "python"),
                   "args": [str(_stand_in(installed.work))], "port": engine_port,
                   "shutdown_timeout_seconds": 1, "stop_grace_seconds": 1},
        "modes": [{"name": "fast"}, {"name": "safe", "args": {"--max-num-seqs": 1}}],
        "gateway": {"port": gateway_port}, "admin": {"port": admin_port},
        "storage": {"state_directory": "state"}}))
    return policy, admin_port


def _wait(what: str, predicate, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (httpx.HTTPError, ValueError, KeyError):
            value = None
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _end_leftovers(work: Path) -> None:
    """SIGKILL whatever this test started that still runs (gateway, stand-in engine)."""
    for p in psutil.process_iter(["cmdline"]):
        if any(str(work) in arg for arg in p.info["cmdline"] or []):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def test_issue_28_run_crash_incident_status_unit(installed: Installed) -> None:
    policy, admin_port = _policy(installed)
    assert "valid policy for fleet 'wheel'" in installed.sup("policy", "check", policy).stdout
    status_url = f"http://127.0.0.1:{admin_port}/api/status"
    log = open(installed.work / "supervisor.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([installed.exe, "run", "--policy", policy], cwd=installed.work,
                            env=installed.env, stderr=log)
    try:
        first = _wait("the engine ready", lambda: (s := httpx.get(status_url).json())
                      ["engine_state"] == "ready" and s["engine_pid"])
        page = httpx.get(f"http://127.0.0.1:{admin_port}/")        # the wheel's static files
        assert page.status_code == 200 and "<html" in page.text.lower()
        os.killpg(first, signal.SIGKILL)                            # the stand-in crashes
        incidents = _wait("its incident", lambda: installed.json(
            "incidents", "--policy", policy, "--json"))
        _wait("a new engine ready", lambda: (s := httpx.get(status_url).json())
              ["engine_state"] == "ready" and s["engine_pid"] not in (None, first))
        kind = incidents[-1]["kind"]
        assert kind in installed.sup("incidents", "--policy", policy).stdout
        assert kind in installed.sup("incident", str(incidents[-1]["id"]), "--policy",
                                     policy).stdout
        assert installed.json("status", "--policy", policy, "--json")["engine_state"] == "ready"
        assert "engine" in installed.sup("status", "--policy", policy).stdout
        unit = installed.sup("systemd-unit", "--policy", policy).stdout
        assert f"ExecStart={installed.exe} run --policy {policy}\n" in unit
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (installed.work / "supervisor.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        _end_leftovers(installed.work)
    stopped, crashed = installed.json("runs", "--policy", policy, "--json")[:2]   # newest first
    assert stopped["planned_stop"] and not crashed["planned_stop"]

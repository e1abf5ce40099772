"""Issue 19: with supervisord's ``supervisor`` package first on the path (or installed over
ours), the console script and ``python -m supervisor`` refuse to run and say why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

#: supervisord's supervisor/__init__.py is this one comment line (4.3.0, from PyPI).
SUPERVISORD_INIT = "# this is a package\n"


def run(code_or_m: list[str], pythonpath: list[Path]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    return subprocess.run([sys.executable, *code_or_m], capture_output=True, text=True,
                          timeout=60, env=env, cwd="/")


def foreign(tmp_path: Path) -> Path:
    pkg = tmp_path / "foreign" / "supervisor"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(SUPERVISORD_INIT)
    (pkg / "supervisord.py").write_text("def main():\n    raise SystemExit('supervisord')\n")
    return pkg.parent


ENTRY = ["-c", "import sys, agent_supervisor_entry; sys.exit(agent_supervisor_entry.main())",
         "--version"]


def test_issue_19_console_script_refuses_supervisord_first_on_the_path(tmp_path) -> None:
    out = run(ENTRY, [foreign(tmp_path), ROOT])
    assert out.returncode == 2, out
    assert out.stdout == ""
    assert f"the 'supervisor' package at {tmp_path / 'foreign' / 'supervisor'} is not " \
        "agent-serving-supervisor's. It is supervisord's" in out.stderr
    assert "virtual environment of its own" in out.stderr
    ok = run(ENTRY, [ROOT])                                  # ours first: runs
    assert ok.returncode == 0 and ok.stdout.startswith("supervisor 0."), ok


def test_issue_19_python_m_supervisor_refuses_a_package_supervisord_overwrote(
        tmp_path) -> None:
    # pip installing supervisord after us overwrites __init__.py and leaves our modules.
    mixed = tmp_path / "site"
    shutil.copytree(ROOT / "supervisor", mixed / "supervisor",
                    ignore=shutil.ignore_patterns("__pycache__", "static"))
    (mixed / "supervisor" / "__init__.py").write_text(SUPERVISORD_INIT)
    (mixed / "supervisor" / "supervisord.py").write_text("")
    out = run(["-m", "supervisor", "--version"], [mixed])
    assert out.returncode == 2 and "Traceback" not in out.stderr, out
    assert f"the 'supervisor' package at {mixed / 'supervisor'} is not " \
        "agent-serving-supervisor's" in out.stderr
    assert run(ENTRY, [mixed, ROOT]).returncode == 2         # the entry point sees it too
    ok = run(["-m", "supervisor", "--version"], [ROOT])
    assert ok.returncode == 0 and ok.stdout.startswith("supervisor 0."), ok


def test_issue_19_postgres_without_the_extra_names_the_extra(tmp_path) -> None:
    # psycopg is the [postgres] extra now; without it the store says what to install.
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from supervisor.record.database import make_engine\n"
            "from supervisor.errors import StoreError\n"
            "try:\n"
            "    make_engine('postgresql+psycopg://u:secret@127.0.0.1:1/x')\n"
            "except StoreError as exc:\n"
            "    print(exc)\n")
    out = run(["-c", code], [ROOT])
    assert out.returncode == 0, out
    assert "its driver 'psycopg' is not installed: pip install " \
        "'agent-serving-supervisor[postgres]'" in out.stdout
    assert "secret" not in out.stdout

"""Issue 19: the PostgreSQL driver is an extra, and the store names it when it is missing.

(The import guard against supervisord's ``supervisor`` package went with issue 28: the
import package is ``agent_supervisor``, and tests/install/ installs the wheel beside
supervisord.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import ROOT


def run(code_or_m: list[str], pythonpath: list[Path]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    return subprocess.run([sys.executable, *code_or_m], capture_output=True, text=True,
                          timeout=60, env=env, cwd="/")


def test_issue_19_postgres_without_the_extra_names_the_extra(tmp_path) -> None:
    # psycopg is the [postgres] extra now; without it the store says what to install.
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from agent_supervisor.record.database import make_engine\n"
            "from agent_supervisor.errors import StoreError\n"
            "try:\n"
            "    make_engine('postgresql+psycopg://u:secret@127.0.0.1:1/x')\n"
            "except StoreError as exc:\n"
            "    print(exc)\n")
    out = run(["-c", code], [ROOT])
    assert out.returncode == 0, out
    assert "its driver 'psycopg' is not installed: install psycopg 3 beside the supervisor " \
        "(pip install 'psycopg[binary]>=3.1,<4'" in out.stdout
    assert "secret" not in out.stdout

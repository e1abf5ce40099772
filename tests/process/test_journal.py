"""Issue 19: under systemd (stderr is the stream ``$JOURNAL_STREAM`` names) log lines
carry journald priorities (``<N>``, sd-daemon(3)); anywhere else they do not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import ROOT

CODE = """
import logging
from agent_supervisor.logs import setup_logging
setup_logging("debug")
log = logging.getLogger("agent_supervisor")
log.debug("d"); log.info("engine ready"); log.warning("memory low"); log.error("gone")
try:
    1 / 0
except ZeroDivisionError:
    log.critical("boom", exc_info=True)
"""


def run_logging(tmp_path: Path, stream: str | None) -> list[str]:
    out = tmp_path / "stderr"
    with open(out, "wb") as f:
        st = os.fstat(f.fileno())
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("JOURNAL_STREAM", None)
        if stream == "this":
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        elif stream is not None:
            env["JOURNAL_STREAM"] = stream
        subprocess.run([sys.executable, "-c", CODE], stderr=f, env=env, timeout=60,
                       check=True)
    return out.read_text().splitlines()


def test_issue_19_priorities_when_stderr_is_the_journal(tmp_path: Path) -> None:
    lines = run_logging(tmp_path, "this")
    assert lines[:4] == ["<7>DEBUG agent_supervisor: d",
                         "<6>INFO agent_supervisor: engine ready",
                         "<4>WARNING agent_supervisor: memory low",
                         "<3>ERROR agent_supervisor: gone"]
    assert lines[4] == "<2>CRITICAL agent_supervisor: boom"
    assert all(line.startswith("<2>") for line in lines[5:]) and len(lines) > 6
    assert lines[-1] == "<2>ZeroDivisionError: division by zero"


def test_issue_19_no_priorities_elsewhere(tmp_path: Path) -> None:
    for stream in (None, "1:2"):          # not under systemd; a stream that is not stderr
        lines = run_logging(tmp_path, stream)
        assert not any(line.startswith("<") for line in lines), lines
        assert lines[1].endswith("INFO agent_supervisor: engine ready")

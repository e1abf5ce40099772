"""``supervisor`` listings end quietly when their reader goes away (SIGPIPE at its default),
but ``cli.main`` called in-process leaves the caller's SIGPIPE as it was: the serial test
phase died with exit 141 in a socket flood test after an in-process ``supervisor report``
had left SIGPIPE deadly (2026-12-03)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from agent_supervisor.cli import main
from tests.helpers.paths import ROOT


def test_main_in_process_restores_sigpipe(capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGPIPE)
    assert before == signal.SIG_IGN           # Python's own start-up setting
    assert main(["completion", "bash"]) == 0
    assert "supervisor" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGPIPE) == before


def test_a_listing_piped_into_head_ends_quietly() -> None:
    # The schema is larger than a pipe buffer (64 KiB), so head leaves while it is written.
    got = subprocess.run(f"{sys.executable} -m agent_supervisor policy schema | head -1",
                         shell=True, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and got.stdout.strip()
    assert "BrokenPipeError" not in got.stderr and "Traceback" not in got.stderr

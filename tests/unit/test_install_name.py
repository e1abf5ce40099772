"""Issue 33, "CLI": an error message told the user to ``pip install
agent-serving-supervisor``, a name not on PyPI. Neither the code's messages nor the docs
may tell anyone to install the distribution by name from an index; they name a wheel or a
checkout (``pipx install ./agent_serving_supervisor-...whl``, ``pip install '.[postgres]'``)
or the third-party package itself (``pip install 'psycopg[binary]'``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: An install command (pip, pipx, uv) whose requirement is the distribution's name, with or
#: without extras or a version; not a path or a wheel file (``./agent_serving_...whl``).
BY_NAME = re.compile(r"\b(?:pipx|pip3?|uv(?: tool| pip)?) install\b[^\n`;)]*?"
                     r"(?<![\w./-])['\"]?agent[-_]serving[-_]supervisor(?![\w.-]*\.whl)")


def by_name(text: str) -> list[str]:
    """The lines of ``text`` that install the distribution by name from an index."""
    return [line.strip() for line in text.splitlines() if BY_NAME.search(line)]


def test_issue_33_the_pattern_tells_an_index_install_from_a_wheel_or_a_checkout() -> None:
    assert by_name("installed: pip install 'agent-serving-supervisor[postgres]'")
    assert by_name("sudo pipx install agent-serving-supervisor")
    assert by_name("uv tool install --python /usr/bin/python3 agent-serving-supervisor")
    assert not by_name("pipx install ./agent_serving_supervisor-0.1.0-py3-none-any.whl")
    assert not by_name("pip install --no-deps -e . && pip install '.[postgres]'")
    assert not by_name("pip uninstall -y agent-serving-supervisor")
    assert not by_name("pip install 'psycopg[binary]>=3.1,<4'")


def test_issue_33_no_message_or_doc_installs_the_package_by_name() -> None:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "agent_supervisor").rglob("*.py")),
             *sorted((ROOT / "agent_supervisor").rglob("*.md")),
             *sorted((ROOT / "deploy").rglob("*"))]
    found = [f"{path.relative_to(ROOT)}: {line}" for path in files if path.is_file()
             for line in by_name(path.read_text(errors="replace"))]
    assert found == [], "the distribution is not on PyPI: install its wheel or a checkout"

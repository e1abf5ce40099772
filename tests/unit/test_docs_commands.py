"""Issue 30 item 6: every ``supervisor ...`` command written in README.md and docs/*.md
still parses: the subcommand path exists (its ``--help`` exits 0) and every ``--flag``
written after it is an option of that subcommand. Every page under docs/ is linked from the
README, and every docs/ link in the README names a page that exists."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_supervisor.cli import _parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A command line that runs ``supervisor``: at its start, after an optional prompt, sudo, env
#: assignments or a path; the first word after it a command or an option (not output such
#: as ``supervisor 0.1.0: fleet ...`` or ``supervisor resumed: ...``).
START = re.compile(r"^(?:\$\s+)?(?:sudo\s+(?:-\S+\s+)*)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*"
                   r"(?:\S*/)?supervisor\s+((?:[a-z][a-z0-9-]*|-{1,2}[a-z][a-z-]*)(?=\s|$).*)$")


def _commands(page: Path) -> Iterator[tuple[int, str]]:
    """(line number, the text after ``supervisor``) for each command in a code block or
    inline code span of ``page`` (a line's comment, pipes and redirections cut off)."""
    fenced = False
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        spans = [line.split(" #")[0]] if fenced else re.findall(r"`([^`]+)`", line)
        for part in (p.strip() for span in spans for p in re.split(r"&&|;|\|\|", span)):
            m = START.match(part)
            if m:
                yield n, re.split(r"\s(?:\||>|2>|<)", m[1])[0].strip()


def _subparser(argv: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser of the longest subcommand path at the head of ``argv`` (past the top
    level's own options), and the rest."""
    p = _parser()
    takes_value = {o for a in p._actions if a.nargs != 0 for o in a.option_strings}
    while argv and argv[0].startswith("-"):
        argv = argv[2:] if argv[0] in takes_value else argv[1:]
    while argv:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or argv[0] not in subs[0].choices:
            break
        p, argv = subs[0].choices[argv[0]], argv[1:]
    return p, argv


def _problems(text: str) -> list[str]:
    try:
        argv = shlex.split(text)
    except ValueError:
        argv = text.split()
    p, rest = _subparser(argv)
    if p.prog == "supervisor" and argv and not argv[0].startswith("-"):
        return [f"no command {argv[0]!r}"]
    if p.prog == "supervisor" and not argv:
        return []
    known = {o for a in p._actions for o in a.option_strings}
    flags = [a.split("=")[0] for a in rest if a.startswith("--") and len(a) > 2]
    return [f"{p.prog}: no option {f}" for f in flags if f not in known]


CASES = [(page, n, text) for page in PAGES for n, text in _commands(page)]


def test_docs_name_commands_at_all() -> None:
    assert len(CASES) > 20, "the command scanner found almost nothing: is it broken?"


@pytest.mark.parametrize(("page", "line", "text"), CASES,
                         ids=[f"{p.name}:{n}" for p, n, _ in CASES])
def test_issue_30_every_command_in_the_docs_parses(page: Path, line: int, text: str) -> None:
    assert not _problems(text), f"{page.relative_to(ROOT)}:{line}: supervisor {text}"
    p, _ = _subparser(shlex.split(text) if text else [])
    with pytest.raises(SystemExit) as done:
        p.parse_args(["--help"])
    assert done.value.code == 0


def test_issue_30_the_readme_links_every_docs_page_and_only_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\]\((docs/[^)#\s]+\.md)", readme))
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert linked >= pages, f"pages the README does not link: {sorted(pages - linked)}"
    assert pages >= linked, f"links to missing pages: {sorted(linked - pages)}"


def test_the_checker_finds_a_bad_command_and_a_bad_flag() -> None:
    assert _problems("frobnicate --now") == ["no command 'frobnicate'"]
    assert _problems("status --no-such-flag") == ["supervisor status: no option --no-such-flag"]
    assert _problems("status --json") == []


def test_issue_30_every_relative_link_in_the_docs_names_a_file_that_exists() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path = target.partition("#")[0]
            if path and not target.startswith(("http://", "https://", "mailto:")) \
                    and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken

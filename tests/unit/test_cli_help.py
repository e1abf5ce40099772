"""Issue 19: every ``--help`` says what each option does and its default."""

from __future__ import annotations

import argparse

from agent_supervisor.cli import _parser
from agent_supervisor.commands.helpfmt import DefaultsFormatter


def parsers(p: argparse.ArgumentParser, name: str = "supervisor"):
    yield name, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def test_issue_19_every_option_has_help_and_its_default() -> None:
    missing = []
    for name, p in parsers(_parser()):
        fmt = DefaultsFormatter(prog=name)
        for action in p._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction
                          | argparse._VersionAction):
                continue
            text = fmt._get_help_string(action) if action.help else ""
            if not text:
                opt = "/".join(action.option_strings) or action.dest
                missing.append(f"{name} {opt}: no help")
            elif action.option_strings and "default" not in text and not action.required:
                missing.append(f"{name} {'/'.join(action.option_strings)}: no default in "
                               f"{text!r}")
    assert not missing, "\n".join(missing)


def test_issue_19_help_gives_defaults_in_the_output() -> None:
    text = _parser()._subparsers._group_actions[0].choices["logs"].format_help()
    assert "how many of the last lines to print first (default: 50)" in " ".join(text.split())

"""``--help`` that gives every option's default (issue 19).

``HelpfulParser`` is the parser class of every ``supervisor`` subcommand: its formatter
appends ``(default: X)`` to an option's help unless the help already says its default,
and ``(default: off)`` to a flag. An option whose default is None must say in its own
help what happens without it (tests/unit/test_cli_help.py checks every option).
"""

from __future__ import annotations

import argparse

__all__ = ["DefaultsFormatter", "HelpfulParser"]


class DefaultsFormatter(argparse.HelpFormatter):
    """Appends the default to help texts that do not give it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        if isinstance(action, argparse._StoreTrueAction):
            return f"{text} (default: off)".strip()
        if action.default is None or isinstance(action, argparse._VersionAction):
            return text
        return f"{text} (default: %(default)s)".strip()


class HelpfulParser(argparse.ArgumentParser):
    """An ArgumentParser whose subcommands format their help with DefaultsFormatter."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

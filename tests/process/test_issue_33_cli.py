"""Issue 33, the CLI as an operator coming from llama-swap or LiteLLM expects it: shell
completion, ``--json`` on every command a script reads, ``$SUPERVISOR_POLICY`` for the
database commands. Each runs the real ``supervisor`` command in a subprocess."""

from __future__ import annotations

import argparse
import subprocess

from agent_supervisor.cli import _parser
from tests.process.test_cli import sup


def subcommand_names(parser: argparse.ArgumentParser) -> set[str]:
    """Every subcommand name of ``parser``, nested ones (``policy check``) included."""
    names: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                names |= {name, *subcommand_names(child)}
    return names


def bash(script: str, commands: str) -> str:
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", f"source /dev/stdin <<'EOF_'\n"
                          f"{script}\nEOF_\n{commands}"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_issue_33_bash_completion_is_set_and_knows_every_subcommand() -> None:
    out = sup("completion", "bash")
    assert out.returncode == 0, out.stderr
    names = subcommand_names(_parser())
    assert {"history", "pin", "completion", "check", "schema", "init"} <= names
    for name in names:
        assert name in out.stdout, name
    said = bash(out.stdout, """
        complete -p supervisor
        ask() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _supervisor;
                echo "${COMPREPLY[*]}"; }
        ask supervisor hist
        ask supervisor policy ""
        ask supervisor step ""
        ask supervisor --log-level ""
        ask supervisor incidents --js
    """).splitlines()
    assert said[0] == "complete -o filenames -F _supervisor supervisor"
    assert said[1:] == ["history", "check schema init -h --help", "up down -h --help --url "
                        "--policy --token-file --timeout", "debug info warning error",
                        "--json"]


def test_issue_33_zsh_and_fish_completion_name_every_subcommand() -> None:
    names = subcommand_names(_parser())
    zsh, fish = sup("completion", "zsh"), sup("completion", "fish")
    assert zsh.returncode == fish.returncode == 0
    assert "bashcompinit" in zsh.stdout and "complete -o filenames -F _supervisor" in zsh.stdout
    for name in names:
        assert f" -a {name} " in fish.stdout, name
    assert "complete -c supervisor -n '__fish_seen_subcommand_from incidents' -l since -r -F" \
        in fish.stdout
    assert sup("completion", "tcsh").returncode == 2

"""Files the installed package carries, written out for an operator (issue 28; found
through ``agent_supervisor/resources.py``, so they work from a wheel with no checkout).

::

    supervisor policy init --from NAME [--output PATH] [--force]   a starting policy
    supervisor policy init --list                 the example policies, one per line
    supervisor dashboards [--output DIR]          the Grafana dashboard (stdout, or DIR)
    supervisor alert-rules [--output DIR]         the Prometheus alerting rules (stdout, or
                                                  DIR with their promtool unit tests)

Exit status: 0 written; 1 the file exists (``--force`` replaces it) or cannot be
written; 2 no ``--from``, or an example that does not exist (the message lists them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from agent_supervisor import resources
from agent_supervisor.commands.common import EXIT_OK, EXIT_USAGE
from agent_supervisor.errors import SetupError

__all__ = ["add_init_parser", "add_parsers", "alert_rules", "dashboards", "policy_init"]

#: The rules file a Prometheus ``rule_files:`` entry names (the other is promtool's test).
RULES_FILE = "supervisor.rules.yml"


def add_init_parser(policy_sub: argparse._SubParsersAction) -> None:
    """Add ``init`` under ``supervisor policy``."""
    init = policy_sub.add_parser("init", help="write a starting policy from a shipped example")
    init.add_argument("--from", dest="example", metavar="NAME",
                      help="the example to start from (`--list` names them; no default: "
                      "required unless --list)")
    init.add_argument("--output", type=Path, help="where to write it; - for stdout "
                      "(default: NAME.yaml in the current directory)")
    init.add_argument("--force", action="store_true", help="replace a file that exists")
    init.add_argument("--list", action="store_true", help="list the examples and exit")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add ``dashboards`` and ``alert-rules`` to the ``supervisor`` parser."""
    dash = sub.add_parser("dashboards", help="the Grafana dashboard over the supervisor's "
                          "and vLLM's metrics, for provisioning")
    dash.add_argument("--output", type=Path, metavar="DIR", help="write the dashboard "
                      "files into DIR, replacing them (default: print the JSON)")
    rules = sub.add_parser("alert-rules", help="the Prometheus alerting rules on the "
                           "supervisor's metrics, for rule_files:")
    rules.add_argument("--output", type=Path, metavar="DIR", help="write the rules, "
                       "their promtool unit tests and the runbook their runbook_url links "
                       f"into DIR, replacing them (default: print {RULES_FILE})")


def _describe(name: str) -> str:
    text = resources.example_policy(name)
    data = yaml.safe_load(text) or {}
    return f"{name:<20} {data.get('description') or data.get('fleet', '')}"


def policy_init(args: argparse.Namespace) -> int:
    """``supervisor policy init``: an example policy written where the operator says."""
    if args.list:
        for name in resources.policy_names():
            print(_describe(name))
        return EXIT_OK
    names = ", ".join(resources.policy_names())
    if not args.example:
        print(f"error: policy init needs --from NAME; the examples: {names}", file=sys.stderr)
        return EXIT_USAGE
    try:
        text = resources.example_policy(args.example)
    except KeyError:
        print(f"error: no example policy {args.example!r}; the examples: {names}",
              file=sys.stderr)
        return EXIT_USAGE
    if args.output is not None and str(args.output) == "-":
        print(text, end="")
        return EXIT_OK
    out: Path = args.output or Path(f"{args.example}.yaml")
    if out.exists() and not args.force:
        raise SetupError(f"{out} exists; --force replaces it")
    _write(out, text)
    print(f"wrote {out} (example {args.example}): set the engine's executable, model and "
          f"paths for this box, then `supervisor policy check {out}`")
    return EXIT_OK


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, making its directory. SetupError naming it on failure."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SetupError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _emit(files: dict[str, str], output: Path | None, shown: list[str]) -> int:
    """Print the texts named in ``shown``, or write every file into ``output``."""
    if output is None:
        for name in shown:
            print(files[name], end="" if files[name].endswith("\n") else "\n")
        return EXIT_OK
    for name, text in files.items():
        _write(output / name, text)
        print(f"wrote {output / name}")
    return EXIT_OK


def dashboards(args: argparse.Namespace) -> int:
    """``supervisor dashboards``: the Grafana dashboards, printed or written into a folder."""
    files = resources.dashboard_files()
    return _emit(files, args.output, sorted(files))


def alert_rules(args: argparse.Namespace) -> int:
    """``supervisor alert-rules``: the rules (printed), or the rules, their promtool
    tests and their runbook (``runbook.md``) written into a folder."""
    return _emit(resources.alert_rule_files(), args.output, [RULES_FILE])

"""What the installed package carries besides its code, found through
``importlib.resources`` (issue 28): never a path relative to the repository, so a wheel
installed by pip, pipx or uv works with no checkout anywhere.

In the repository ``agent_supervisor/data/`` holds three links to the top-level folders
the design card names, which stay the source (``migrations/``, ``dashboards/``,
``policies/``); a wheel carries real copies of their files (pyproject.toml's
package-data). Every file the service reads at run time, and where it is in a wheel:

=============================  ==========================================  ============
what                           in the installed package                    read by
=============================  ==========================================  ============
Alembic env and revisions      ``data/migrations/`` (env.py, versions/)    every command
                                                                           that opens the
                                                                           store
dashboard page (HTML, JS)      ``show/static/``                            the admin API
Grafana dashboard              ``data/dashboards/supervisor.json``         ``dashboards``
Prometheus alert rules, tests  ``data/dashboards/alerts/*.yml``            ``alert-rules``
alerts' runbook                ``data/dashboards/alerts/runbook.md``       ``alert-rules``
policy JSON Schema             ``data/policies/policy.schema.json``        ``policy init``
example policies               ``data/policies/<name>.yaml``               ``policy init``
=============================  ==========================================  ============

Directories are handed out as ``Path``: Alembic and Starlette's ``StaticFiles`` want one,
and every pip, pipx or uv install unpacks the wheel onto the file system. A package run
from a zip file gets a ``FileNotFoundError`` naming the directory instead.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

__all__ = [
    "PACKAGE", "alert_rule_files", "dashboard_files", "example_policy", "migrations_dir",
    "policy_names", "policy_schema_text", "static_dir",
]

PACKAGE = "agent_supervisor"
#: The schema's file name beside the examples (the YAML language server reads it).
SCHEMA_NAME = "policy.schema.json"


def _data(*parts: str) -> Traversable:
    return files(PACKAGE).joinpath("data", *parts)


def _on_disk(node: Traversable) -> Path:
    """``node`` as a real directory. Raises FileNotFoundError when it is not one."""
    if not isinstance(node, Path) or not node.is_dir():
        raise FileNotFoundError(f"{node}: not a directory of the installed package "
                                f"{PACKAGE} (reinstall it from a wheel or a checkout)")
    return node


def migrations_dir() -> Path:
    """The Alembic script directory (env.py, script.py.mako, versions/)."""
    return _on_disk(_data("migrations"))


def static_dir() -> Path:
    """The dashboard page's files (index.html, the JS, vendored uPlot)."""
    return _on_disk(files(PACKAGE).joinpath("show", "static"))


def policy_names() -> list[str]:
    """The example policies' names (``gb10-nvfp4-mtp`` for gb10-nvfp4-mtp.yaml), sorted."""
    return sorted(node.name.removesuffix(".yaml") for node in _data("policies").iterdir()
                  if node.name.endswith(".yaml"))


def example_policy(name: str) -> str:
    """The text of example policy ``name`` (as ``policy_names`` spells it).

    Raises: KeyError naming the known names when there is no such example.
    """
    if name not in policy_names():
        raise KeyError(f"no example policy {name!r}; the examples: "
                       f"{', '.join(policy_names())}")
    return _data("policies", f"{name}.yaml").read_text(encoding="utf-8")


def policy_schema_text() -> str:
    """The policy's JSON Schema as shipped (``supervisor policy schema`` prints the same)."""
    return _data("policies", SCHEMA_NAME).read_text(encoding="utf-8")


def _texts(node: Traversable, suffix: str | tuple[str, ...]) -> dict[str, str]:
    return {child.name: child.read_text(encoding="utf-8")
            for child in sorted(node.iterdir(), key=lambda c: c.name)
            if child.is_file() and child.name.endswith(suffix)}


def dashboard_files() -> dict[str, str]:
    """The Grafana dashboards: file name -> JSON text (for file provisioning)."""
    return _texts(_data("dashboards"), ".json")


def alert_rule_files() -> dict[str, str]:
    """The Prometheus alerting rules, their promtool unit tests and the runbook their
    ``runbook_url`` annotations link (``runbook.md``, beside them): file name -> text."""
    return _texts(_data("dashboards", "alerts"), (".yml", ".md"))

"""The ``supervisor`` console script, outside the ``supervisor`` package on purpose.

PyPI's ``supervisor`` (supervisord) installs a top-level package of the same name. In one
environment the two collide: whichever is first on ``sys.path`` (or installed last, over
the other's files) is the one ``import supervisor`` finds. This module is imported under
a name of its own, looks at the ``supervisor`` package the path gives before importing
anything from it, and refuses to run, saying so, when it is not ours. Ours carries the
marker ``__agent_serving_supervisor__`` in its ``__init__.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = ["foreign_supervisor", "main"]

MARKER = "__agent_serving_supervisor__"
EXIT_FOREIGN = 2


def foreign_supervisor() -> str | None:
    """Why the ``supervisor`` package on the path is not this project's, or None if it is.

    Reads the package's ``__init__.py`` (does not import it)."""
    spec = importlib.util.find_spec("supervisor")
    if spec is None or not spec.submodule_search_locations:
        return ("no package named 'supervisor' on the Python path: reinstall "
                "agent-serving-supervisor (pip install agent-serving-supervisor)")
    where = Path(next(iter(spec.submodule_search_locations)))
    try:
        ours = MARKER in (where / "__init__.py").read_text(errors="replace")
    except OSError:
        ours = False
    if ours:
        return None
    whose = (" It is supervisord's (PyPI 'supervisor'), which installs a top-level package "
             "of the same name." if (where / "supervisord.py").exists() else "")
    return (f"the 'supervisor' package at {where} is not agent-serving-supervisor's.{whose} "
            "The two cannot share one environment: give agent-serving-supervisor a virtual "
            "environment of its own (python3 -m venv), or `pip uninstall supervisor` and "
            "reinstall agent-serving-supervisor.")


def main() -> int:
    """Entry point: refuse on a foreign package (exit 2), else ``supervisor.cli.main``."""
    problem = foreign_supervisor()
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_FOREIGN
    from supervisor.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())

"""``python -m supervisor``: the same as the ``supervisor`` command.

It refuses to run when the ``supervisor`` package it belongs to is not ours: a
supervisord (PyPI ``supervisor``) installed over it replaces ``__init__.py``, and then
nothing else of this package can be trusted to be ours either.
"""

import sys

import supervisor

if not getattr(supervisor, "__agent_serving_supervisor__", False):
    print(f"error: the 'supervisor' package at {supervisor.__path__[0]} is not "
          "agent-serving-supervisor's (supervisord, PyPI 'supervisor', installs a package of "
          "the same name). Give agent-serving-supervisor a virtual environment of its own, "
          "or `pip uninstall supervisor` and reinstall agent-serving-supervisor.",
          file=sys.stderr)
    sys.exit(2)

from supervisor.cli import main

sys.exit(main())

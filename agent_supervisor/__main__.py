"""``python -m agent_supervisor``: the same as the ``supervisor`` command."""

import sys

from agent_supervisor.cli import main

sys.exit(main())

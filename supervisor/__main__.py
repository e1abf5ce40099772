"""``python -m supervisor``: the same as the ``supervisor`` command."""

import sys

from supervisor.cli import main

sys.exit(main())

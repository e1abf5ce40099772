"""``python -m agent_supervisor``: the same as the ``supervisor`` command.

``python -m agent_supervisor gateway ...`` (how ``supervisor run`` starts its gateway
process) goes straight to agent_supervisor/gateway/command.py, without the other commands'
imports; every other command line goes through agent_supervisor/cli.py."""

import sys

if sys.argv[1:2] == ["gateway"]:
    from agent_supervisor.gateway.command import main as gateway_main

    sys.exit(gateway_main(sys.argv[2:]))

from agent_supervisor.cli import main

sys.exit(main())

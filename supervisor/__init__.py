"""agent-serving-supervisor: a reliability supervisor for agent-serving vLLM engines.

It runs the engine, watches it and the box, steps the engine down a ladder of safer
modes before it becomes unstable, and records every incident and mode change. See
``supervisor/README.md`` for where each concern lives.
"""

from __future__ import annotations

from supervisor.errors import PolicyError, SupervisorError
from supervisor.policy import Policy, load_policy, load_policy_file

__version__ = "0.1.0"

#: Tells this package from supervisord's, which PyPI installs under the same name
#: (checked by agent_supervisor_entry.py and __main__.py before anything else runs).
__agent_serving_supervisor__ = True

__all__ = [
    "Policy",
    "PolicyError",
    "SupervisorError",
    "__version__",
    "load_policy",
    "load_policy_file",
]

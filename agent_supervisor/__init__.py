"""agent-serving-supervisor: a reliability supervisor for agent-serving vLLM engines.

It runs the engine, watches it and the box, steps the engine down a ladder of safer
modes before it becomes unstable, and records every incident and mode change. See
``agent_supervisor/README.md`` for where each concern lives.
"""

from __future__ import annotations

from agent_supervisor.errors import PolicyError, SupervisorError
from agent_supervisor.policy.load import load_policy, load_policy_file
from agent_supervisor.policy.model import Policy

__version__ = "0.1.0"

__all__ = [
    "Policy",
    "PolicyError",
    "SupervisorError",
    "__version__",
    "load_policy",
    "load_policy_file",
]

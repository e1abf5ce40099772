"""Where a policy file's state lives when the file does not say (issue 19).

A policy in /etc must not put its database and engine logs under /etc (the FHS keeps /etc
for configuration; systemd's ``StateDirectory=`` lives under /var/lib). ``load_policy_file``
applies ``with_state_default``; ``load_policy`` (pure, from text) does not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_supervisor.policy import Policy

__all__ = ["SYSTEM_STATE_ROOT", "default_state_directory", "with_state_default"]

#: The state of a policy kept in /etc: ``/var/lib/agent-supervisor/<fleet>``.
SYSTEM_STATE_ROOT = Path("/var/lib/agent-supervisor")


def default_state_directory(policy_path: Path, fleet: str,
                            environ: Mapping[str, str]) -> Path | None:
    """The state directory of a policy file that sets no ``storage.state_directory``:
    systemd's ``$STATE_DIRECTORY`` (set by ``StateDirectory=``; the first of a
    colon-separated list, systemd.exec(5)) when the service runs under it; else
    ``/var/lib/agent-supervisor/<fleet>`` for a file under ``/etc``; else None
    (``.supervisor`` beside the file, the model's default)."""
    given = environ.get("STATE_DIRECTORY", "").split(":")[0]
    if given:
        return Path(given)
    if Path(os.path.abspath(policy_path)).is_relative_to("/etc"):
        return SYSTEM_STATE_ROOT / fleet
    return None


def with_state_default(policy: Policy, policy_path: Path,
                       environ: Mapping[str, str] | None = None) -> Policy:
    """``policy`` with ``storage.state_directory`` set to ``default_state_directory``
    (``environ``: default ``os.environ``) when the file left it unset and a default
    applies; else ``policy`` itself."""
    if "state_directory" in policy.storage.model_fields_set:
        return policy
    default = default_state_directory(policy_path, policy.fleet,
                                      os.environ if environ is None else environ)
    if default is None:
        return policy
    storage = policy.storage.model_copy(update={"state_directory": str(default)})
    return policy.model_copy(update={"storage": storage})

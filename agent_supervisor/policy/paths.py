"""Where a policy file's state lives when the file does not say (issue 19).

A policy in /etc must not put its database and engine logs under /etc (the FHS keeps /etc
for configuration; systemd's ``StateDirectory=`` lives under /var/lib). ``load_policy_file``
applies it through ``with_state_default`` (agent_supervisor/policy/load.py); ``load_policy`` (pure,
from text) does not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["SYSTEM_STATE_ROOT", "default_state_directory"]

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


"""``supervisor status``: the running service's state from its admin API, in a few lines.

Exit status: 0 the engine is served or on its way; 3 the box needs a reboot (the ladder
holds: GPU lost, memory pinned, processes stuck in the driver); 1 the service does not
answer.
"""

from __future__ import annotations

import sys
from typing import Any

import httpx

from supervisor.policy import Policy

__all__ = ["EXIT_REBOOT_REQUIRED", "format_status", "status_command"]

#: ``supervisor status`` when the box needs a reboot (scripts and monitoring can test it).
EXIT_REBOOT_REQUIRED = 3


def format_status(st: dict[str, Any]) -> str:
    """The operator's lines: a REBOOT REQUIRED banner first when there is one."""
    lines = []
    reboot = st.get("reboot_required")
    if reboot:
        lines.append(f"REBOOT REQUIRED: {reboot['kind']} - recommended action "
                     f"{reboot['recommended_action']}: {reboot['explanation']}")
    lines.append(f"fleet {st['fleet']}: mode {st['mode']} (rung {st['rung']}), engine "
                 f"{st['engine_state']} for {st['engine_seconds_in_state']} s")
    d = st.get("last_decision")
    if d:
        lines.append(f"last decision: {d['action']} -> {d['mode']}: {d['explanation']}")
    return "\n".join(lines)


def status_command(policy: Policy, *, timeout_seconds: float = 5.0) -> int:
    """Print the status of the service running ``policy`` (its admin API)."""
    admin = policy.admin
    host = "127.0.0.1" if admin.host in ("0.0.0.0", "::") else admin.host
    url = f"http://{host}:{admin.port}/api/status"
    try:
        resp = httpx.get(url, timeout=timeout_seconds)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        print(f"error: the supervisor does not answer at {url}: {exc}", file=sys.stderr)
        return 1
    st = resp.json()
    print(format_status(st))
    return EXIT_REBOOT_REQUIRED if st.get("reboot_required") else 0

"""The supervisor's one capability, CAP_SYSLOG, kept from its children.

The shipped unit gives the service ``AmbientCapabilities=CAP_SYSLOG`` so that it can open
/dev/kmsg under ``kernel.dmesg_restrict=1`` (act/systemd.py). Ambient capabilities pass
through execve(2) to every child (capabilities(7), "Transformation of capabilities during
execve()": P'(ambient) = P(ambient) for a file without capabilities, and P'(permitted)
includes it), so the engine and the gateway would hold it too. ``drop_ambient_capabilities``
clears the ambient set in the child between fork and exec (``preexec_fn``); for a non-root
service user that leaves the child with no capability at all. A root service keeps the
bounding set's CAP_SYSLOG in its children (root's execve fills the permitted set from the
bounding set); the unit's docstring advises against root.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["PR_CAP_AMBIENT", "PR_CAP_AMBIENT_CLEAR_ALL", "drop_ambient_capabilities"]

#: <linux/prctl.h>: prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), Linux 4.3+.
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def drop_ambient_capabilities() -> None:
    """Clear this process's ambient capability set (for ``preexec_fn``). A kernel without
    ambient capabilities (EINVAL, before 4.3) has nothing to clear; never raises."""
    _LIBC.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

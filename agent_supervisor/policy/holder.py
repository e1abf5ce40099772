"""``PolicyHolder``: the one current policy of a running service.

Every part that needs the policy holds this and reads ``current`` on use, so a reload
is one swap (``swap``) seen by all at once, never five objects overwritten by reaching
into them. Parts that keep state derived from the policy (the window's age, the
gateway's limits, the tick's interval) subscribe with ``on_swap``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent_supervisor.policy.model import Policy

__all__ = ["PolicyHolder"]


class PolicyHolder:
    """Holds the current ``Policy`` (and the file it came from, if any).

    ``swap(new)`` makes ``new`` current, then calls each ``on_swap`` listener with
    (old, new) in the order they subscribed. Not thread-safe: one asyncio loop.
    """

    def __init__(self, policy: Policy, path: Path | None = None) -> None:
        self._current = policy
        self.path = path
        self._listeners: list[Callable[[Policy, Policy], None]] = []

    @classmethod
    def of(cls, policy: Policy | PolicyHolder) -> PolicyHolder:
        """``policy`` itself when it is a holder, else a holder of it (for parts built
        alone, as tests do)."""
        return policy if isinstance(policy, PolicyHolder) else cls(policy)

    @property
    def current(self) -> Policy:
        """The policy in force now."""
        return self._current

    def on_swap(self, listener: Callable[[Policy, Policy], None]) -> None:
        """Call ``listener(old, new)`` after every swap."""
        self._listeners.append(listener)

    def swap(self, new: Policy) -> Policy:
        """Make ``new`` the current policy; returns the old one."""
        old, self._current = self._current, new
        for listener in self._listeners:
            listener(old, new)
        return old

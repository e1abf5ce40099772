"""``Reloader``: a new policy file taken while running (SIGHUP, the file watch).

The new file is validated first: a bad one is refused (``policy_rejected``) and the
running policy stays. Sections that cannot change while running (the engine's host
and port, the gateway's and the admin API's listeners, storage, fleet) are refused too.
Otherwise the holder swaps the policy (its listeners apply it at once: gateway limits,
the window, the tick interval) and the ladder is carried over by mode name
(``decide/ladder.reloaded``); when the running mode's engine arguments changed, the
engine is drained and restarted through the normal switch (Action.RELOAD).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from agent_supervisor.act.incident import Incident
from agent_supervisor.decide.ladder import reloaded
from agent_supervisor.errors import PolicyError
from agent_supervisor.policy import Policy, PolicyHolder, load_policy_file
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder

__all__ = ["Reloader", "fixed_sections"]

logger = logging.getLogger(__name__)


def fixed_sections(old: Policy, new: Policy) -> list[str]:
    """Settings a running service cannot change (listeners, storage, fleet)."""
    fixed = []
    if (old.engine.host, old.engine.port) != (new.engine.host, new.engine.port):
        fixed.append("engine.host/port")
    for name in ("gateway", "admin"):
        a, b = getattr(old, name), getattr(new, name)
        if (a.enabled, a.host, a.port) != (b.enabled, b.host, b.port):
            fixed.append(f"{name}.enabled/host/port")
    if (old.gateway.tls is None) != (new.gateway.tls is None):
        fixed.append("gateway.tls on/off")        # its files are re-read at a reload
    if old.storage != new.storage or old.state_directory != new.state_directory:
        fixed.append("storage")
    if old.fleet != new.fleet:
        fixed.append("fleet")
    return fixed


def _mtime(path: Path | None) -> float | None:
    try:
        return None if path is None else path.stat().st_mtime
    except OSError:
        return None


class Reloader:
    """Reloads ``policy.path`` into the holder. ``poke()`` asks for a decision at once."""

    def __init__(self, policy: PolicyHolder, ladder: Ladder, recorder: Recorder,
                 poke: Callable[[], None]) -> None:
        self._policy = policy
        self.ladder = ladder
        self.recorder = recorder
        self._poke = poke
        self._mtime = _mtime(policy.path)

    async def reload(self, reason: str = "SIGHUP") -> bool:
        """Reload the policy file; returns whether the new policy was taken."""
        path = self._policy.path
        if path is None:
            logger.warning("reload (%s) ignored: the policy did not come from a file", reason)
            return False
        self._mtime = _mtime(path)
        old = self._policy.current
        try:
            new = await asyncio.to_thread(load_policy_file, path)
            fixed = fixed_sections(old, new)
            if fixed:
                raise PolicyError(str(path), message="cannot change while running: "
                                  + ", ".join(fixed) + " (restart the service for that)")
        except PolicyError as exc:
            logger.error("policy reload (%s) refused, the running policy stays: %s", reason, exc)
            self.recorder.incident(Incident(
                kind="policy_rejected", severity="warning", started_at=datetime.now(UTC),
                action="keep_policy", mode=old.modes[self.ladder.rung].name,
                rung=self.ladder.rung, explanation=f"policy reload ({reason}) refused: {exc}",
                outcome="the running policy stays", findings=[{"error": str(exc)}]))
            return False
        rung, extra = reloaded(self.ladder.state, old, new)
        changed = bool(extra["reload_pending"])
        self.ladder.apply("reload", rung, **extra)
        self._policy.swap(new)
        mode = new.modes[rung].name
        logger.info("policy reloaded (%s): %d modes; running mode %s%s", reason,
                    len(new.modes), mode, " changed: the engine restarts" if changed
                    else " unchanged")
        self.recorder.incident(Incident(
            kind="policy_reloaded", severity="info", started_at=datetime.now(UTC),
            action="reload", mode=mode, rung=rung,
            explanation=f"policy reloaded ({reason}); mode {mode} "
            + ("arguments changed: drain and restart" if changed else "unchanged"),
            outcome="new policy in force"))
        self._poke()
        return True

    async def watch(self) -> None:
        """The file-watch job: reload when the policy file's mtime changed."""
        policy = self._policy.current
        if not policy.recovery.watch_policy_file or self._policy.path is None:
            return
        mtime = _mtime(self._policy.path)
        if mtime is not None and mtime != self._mtime:
            await self.reload("policy file changed")

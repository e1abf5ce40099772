"""``Situation``: everything a guard may look at, passed in one value. Pure data."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.policy.model import Mode, Policy
from agent_supervisor.telemetry.baselines import AcceptanceBaselines, Baselines, EngineUpdate
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

__all__ = ["Situation"]

@dataclass(frozen=True)
class Situation:
    """The window, the ladder, the policy, the time and the calibrated baselines (throughput
    and acceptance by position)."""

    window: Window
    ladder: LadderState
    policy: Policy
    now_s: float
    baselines: Baselines = field(default_factory=dict)
    acceptance: AcceptanceBaselines = field(default_factory=dict)
    """Usual acceptance by position per mode (the launch-lottery check)."""
    update: EngineUpdate | None = None
    """The running engine's version against the last good run on another version
    (``engine_update`` guard; issue 29)."""

    @property
    def latest(self) -> Sample | None:
        """The newest sample."""
        return self.window.latest

    @property
    def mode(self) -> Mode:
        """The mode of the current rung."""
        return self.policy.modes[self.ladder.rung]

    def run_samples(self) -> list[Sample]:
        """Samples of the newest sample's engine run, oldest first."""
        latest = self.window.latest
        if latest is None:
            return []
        return [s for s in self.window if s.engine_run_id == latest.engine_run_id]

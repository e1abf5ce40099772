"""``StatusView``: the admin API's read model of the running service (it implements
``show.api.deps.AdminBackend``): reads of the ladder, the engine, the gateway, the
last decision and the window, and the operator's levers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from agent_supervisor import __version__
from agent_supervisor.act.advice import ACT, ADVISE
from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.decide.recommended import RECOMMENDED
from agent_supervisor.policy import Policy, PolicyHolder
from agent_supervisor.policy.urls import gateway_url
from agent_supervisor.record.store import Store
from agent_supervisor.runtime.gateway_face import GatewayFace
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.supervision import Supervision
from agent_supervisor.show.api.models import DecisionOut, LadderRung, StatusOut
from agent_supervisor.show.metrics import StateCollector, StateView
from agent_supervisor.telemetry.rates import EngineRates, engine_rates
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

__all__ = ["LastDecision", "StatusView"]


class LastDecision:
    """The last decision taken and when (monotonic seconds); None before the first."""

    def __init__(self) -> None:
        self.decision: Decision | None = None
        self.at_s: float | None = None
        self.reboot: Decision | None = None
        """The REBOOT_REQUIRED decision the ladder holds on (issue 12), if any."""

    def set(self, decision: Decision, at_s: float) -> None:
        """Keep ``decision``, taken at ``at_s``."""
        self.decision, self.at_s = decision, at_s
        if decision.action is Action.REBOOT_REQUIRED:
            self.reboot = decision


class StatusView:
    """Read model over the service's parts; ``poke()`` decides at once after a lever."""

    def __init__(self, policy: PolicyHolder, ladder: Ladder, launcher: EngineLauncher,
                 window: Window, store: Store, registry: CollectorRegistry,
                 last: LastDecision, gateway: GatewayFace | None, *,
                 poke: Callable[[], None], supervision: Supervision | None = None) -> None:
        self._policy = policy
        self.ladder = ladder
        self.launcher = launcher
        self.window = window
        self._store = store
        self._registry = registry
        self.last = last
        self.gateway = gateway
        self._poke = poke
        self.supervision = supervision
        """Act or advise (None: always act); the ``act`` and ``advise`` levers switch it."""
        self.started_s = time.monotonic()

    @property
    def policy(self) -> Policy:
        """The policy in force."""
        return self._policy.current

    @property
    def store(self) -> Store:
        """The service's store."""
        return self._store

    @property
    def registry(self) -> CollectorRegistry:
        """The supervisor's own metrics."""
        return self._registry

    def rates(self) -> EngineRates | None:
        """Rates over the last minute of the window (None while it is empty)."""
        latest = self.window.latest
        return None if latest is None else engine_rates(self.window, 60.0, latest.t_s)

    def collector(self, spooled: Callable[[], int]) -> StateCollector:
        """The /metrics gauges of the service's state (``spooled``: records waiting)."""
        return StateCollector(StateView(lambda: self._policy.current,
                                        latest=lambda: self.window.latest, rates=self.rates,
                                        rung=lambda: self.ladder.rung, spooled=spooled,
                                        ladder=lambda: self.ladder.state))

    def samples(self) -> list[Sample]:
        """A copy of the window (the tick appends meanwhile)."""
        return list(self.window)

    def operate(self, action: str, mode: str | None = None) -> LadderState:
        """Pull an operator lever (``Ladder.operate``; ``act`` and ``advise``: the
        supervision mode, ``Supervision.switch``), then decide at once. Raises ValueError
        for a lever this service cannot pull."""
        if action in (ACT, ADVISE):
            if self.supervision is None:
                raise ValueError("this service has no advise mode")
            self.supervision.switch(action)          # recorded; it asks for a decision
            return self.ladder.state
        state = self.ladder.operate(action, mode)
        self._poke()
        return state

    def engine_log(self) -> tuple[str, str, Path] | None:
        """(run id, mode, log file) of the current engine run; None before the first."""
        run = self.launcher.run
        return None if run is None else (run.run_id, run.mode, run.log_path)

    def status(self) -> StatusOut:
        """Mode, rung, the ladder, engine state and the last decision."""
        now = time.monotonic()
        policy, ladder = self.policy, self.ladder.state
        st = self.launcher.status()
        d = self.last.decision
        return StatusOut(
            fleet=policy.fleet, version=__version__, mode=policy.modes[ladder.rung].name,
            rung=ladder.rung, ladder=self._rungs(policy, ladder, now),
            engine_state=str(st.state), engine_run_id=st.run_id, engine_pid=st.pid,
            engine_runtime=policy.engine.runtime,
            engine_container=self.launcher.run.container_name if self.launcher.run else None,
            engine_seconds_in_state=round(now - st.since_s, 1),
            last_decision=None if d is None else DecisionOut(
                action=str(d.action), rung=d.rung, mode=policy.modes[d.rung].name,
                explanation=d.explanation, findings=[f.to_dict() for f in d.findings]),
            paused=ladder.paused,
            pinned=None if ladder.pinned is None else policy.modes[ladder.pinned].name,
            requested=None if ladder.requested is None
            else policy.modes[ladder.requested].name,
            probation_seconds_left=None if (left := ladder.probation_left(
                now, policy.hysteresis.probation_seconds)) is None else round(left),
            shed=ladder.shed, calm_seconds=round(ladder.calm_for(now), 1),
            calm_needed_seconds=policy.hysteresis.calm_seconds if ladder.rung > 0 else None,
            gateway=self._gateway(policy), limits=policy.modes[ladder.rung].gateway.model_dump(),
            last_decision_seconds_ago=None if self.last.at_s is None
            else round(now - self.last.at_s, 1),
            uptime_seconds=round(now - self.started_s, 1),
            reboot_required=reboot_required(ladder.reboot_required, self.last.reboot),
            supervision=ACT if self.supervision is None else self.supervision.mode,
            adopt=getattr(self.launcher, "adoption", lambda: None)(),
        )

    @staticmethod
    def _rungs(policy: Policy, ladder: LadderState, now: float) -> list[LadderRung]:
        return [LadderRung(rung=i, mode=m.name, description=m.description,
                           speculative=m.speculative, current=i == ladder.rung,
                           barred_until_seconds=None if (b := ladder.failing_until(i)) is None
                           or b <= now else round(b - now))
                for i, m in enumerate(policy.modes)]

    def _gateway(self, policy: Policy) -> dict[str, object] | None:
        gw = self.gateway
        if gw is None:
            return None
        return {"url": gateway_url(policy, "/v1"),          # https with gateway.tls
                **gw.summary()}

    async def before_scrape(self) -> None:
        """The gateway process's counters, fresh for this /metrics scrape."""
        if self.gateway is not None:
            await self.gateway.refresh()


def reboot_required(kind: str | None, decision: Decision | None) -> dict[str, Any] | None:
    """The reboot-required hold with what to do (NVSentinel's words), or None."""
    if kind is None:
        return None
    worst = decision.findings[0] if decision is not None and decision.findings else None
    action = worst.recommended_action if worst is not None else \
        RECOMMENDED.get(kind, ("RESTART_BM",))[0]
    return {"kind": kind, "recommended_action": action,
            "explanation": decision.explanation if decision is not None else kind,
            "evidence": worst.evidence if worst is not None else {}}

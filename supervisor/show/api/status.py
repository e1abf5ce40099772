"""GET /api/status: where the ladder stands, what the engine does, the last decision."""

from __future__ import annotations

import time

from fastapi import APIRouter

from supervisor import __version__
from supervisor.show.api.deps import ReadAccess, SupervisorDep
from supervisor.show.api.models import DecisionOut, LadderRung, StatusOut

router = APIRouter(prefix="/api", tags=["status"], dependencies=[ReadAccess])


@router.get("/status", response_model=StatusOut)
async def status(sup: SupervisorDep) -> StatusOut:
    """Mode, rung, the ladder, engine state and the last decision with its explanation."""
    now = time.monotonic()
    policy, ladder = sup.policy, sup.ladder
    st = sup.launcher.status()
    d = sup.last_decision
    gw = sup.gateway
    return StatusOut(
        fleet=policy.fleet, version=__version__, mode=policy.modes[ladder.rung].name,
        rung=ladder.rung,
        ladder=[LadderRung(rung=i, mode=m.name, description=m.description,
                           speculative=m.speculative, current=i == ladder.rung,
                           barred_until_seconds=None if (b := ladder.failing_until(i)) is None
                           or b <= now else round(b - now))
                for i, m in enumerate(policy.modes)],
        engine_state=str(st.state), engine_run_id=st.run_id, engine_pid=st.pid,
        engine_seconds_in_state=round(now - st.since_s, 1),
        last_decision=None if d is None else DecisionOut(
            action=str(d.action), rung=d.rung, mode=policy.modes[d.rung].name,
            explanation=d.explanation, findings=[f.to_dict() for f in d.findings]),
        paused=ladder.paused,
        pinned=None if ladder.pinned is None else policy.modes[ladder.pinned].name,
        requested=None if ladder.requested is None else policy.modes[ladder.requested].name,
        probation_seconds_left=None if ladder.probation_until_s is None
        or ladder.probation_until_s <= now else round(ladder.probation_until_s - now),
        shed=ladder.shed, calm_seconds=round(ladder.calm_for(now), 1),
        gateway=None if gw is None else {
            "url": f"http://{policy.gateway.host}:{policy.gateway.port}/v1",
            "held": gw.admission.held, "requests_in_flight": gw.admission.in_flight,
            "requests_queued": gw.admission.queued,
            "max_concurrency": gw.admission.max_concurrency},
        limits=policy.modes[ladder.rung].gateway.model_dump(),
        last_decision_seconds_ago=None if sup.last_decision_s is None
        else round(now - sup.last_decision_s, 1),
        uptime_seconds=round(now - sup.started_s, 1),
    )

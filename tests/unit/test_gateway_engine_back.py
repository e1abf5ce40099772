"""``engine_back`` (agent_supervisor/gateway/engine_back.py): the one "is the engine
back?" rule the gateway's waits share (issue 30), on a real in-process ``Gateway`` whose
engine port has nothing listening (so /health cannot answer 200)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from agent_supervisor.gateway.engine_back import NO_SWITCH_GRACE_SECONDS, engine_back
from agent_supervisor.gateway.server import Gateway
from tests.helpers.policies import fake_engine_policy


async def test_issue_30_back_after_a_switch_or_after_the_grace_with_health(
        tmp_path: Path) -> None:
    gw = Gateway(fake_engine_policy(tmp_path), rung=0, registry=CollectorRegistry())
    try:
        gw.release(0)
        epoch = gw.epoch
        # No switch, within the grace: not asked of the engine yet.
        assert await engine_back(gw, epoch, 0.0) is False
        # Past the grace: the engine's /health decides; nothing listens there.
        assert await engine_back(gw, epoch, NO_SWITCH_GRACE_SECONDS) is False
        # A switch began (held): not back, whatever the time.
        await gw.hold("engine restarting", drain=False)
        assert await engine_back(gw, epoch, 1e6) is False
        # The switch completed: back, without asking the engine.
        gw.release(0)
        assert await engine_back(gw, epoch, 0.0) is True
        # Measured from the new epoch, the same engine is not "back" yet.
        assert await engine_back(gw, gw.epoch, 0.0) is False
    finally:
        await gw.client.aclose()

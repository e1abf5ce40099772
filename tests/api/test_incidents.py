"""GET /api/incidents and /api/incidents/{id}, on an incident the service really recorded
(the fake engine's EngineCore killed with SIGKILL)."""

from __future__ import annotations

import os
import signal

from agent_supervisor.states import EngineState
from tests.helpers.launcher import core_pid
from tests.helpers.waiting import wait_for


async def test_a_real_crash_is_listed_with_its_evidence(client, service) -> None:
    assert (await client.get("/api/incidents")).json() == []
    os.kill(core_pid(service.launcher.run.pid), signal.SIGKILL)
    await wait_for(lambda: service.launcher.state is EngineState.READY
                   and service.launcher.run.crash_reason is None
                   and service.ladder.state.handled_run_id is not None, timeout=20, what="restart")
    await service.writer.flush()
    (inc,) = (await client.get("/api/incidents")).json()
    assert (inc["kind"], inc["severity"], inc["action"]) == (
        "engine_core_died", "critical", "restart")
    assert inc["log_tail"] is None                    # only in the detail
    detail = (await client.get(f"/api/incidents/{inc['id']}")).json()
    # The tail as it was when the crash was seen: the engine's own lines up to then.
    assert detail["log_tail"].startswith("fake engine pid ") and "ready" in detail["log_tail"]
    assert detail["findings"][0]["evidence"]["engine_state"] == "crashed"
    assert (await client.get("/api/incidents", params={"kind": "memory_floor"})).json() == []


async def test_unknown_incident_is_404_in_the_error_shape(client) -> None:
    r = await client.get("/api/incidents/999")
    assert r.status_code == 404
    assert r.json() == {"error": {"message": "no incident 999", "type": "admin_error",
                                  "code": 404}, "src": "supervisor"}

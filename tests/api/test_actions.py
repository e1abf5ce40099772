"""POST /api/actions/{action}: the token, and what each lever does for real."""

from __future__ import annotations

import pytest
from httpx import ASGITransport, AsyncClient

from supervisor.show.api.app import create_admin_app
from supervisor.states import EngineState
from tests.api.conftest import auth
from tests.process.test_launcher import wait_for


@pytest.mark.parametrize("action", ["pin", "unpin", "step-down", "step-up", "pause", "resume"])
async def test_actions_need_the_token(client, action) -> None:
    assert (await client.post(f"/api/actions/{action}", json={"mode": "safe"})).status_code == 401
    bad = {"Authorization": "Bearer wrong"}
    r = await client.post(f"/api/actions/{action}", json={"mode": "safe"}, headers=bad)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


async def test_pin_moves_the_engine_and_records_an_operator_transition(client, service) -> None:
    r = await client.post("/api/actions/pin", json={"mode": "safe"}, headers=auth())
    assert r.status_code == 200 and r.json()["pinned"] == "safe"
    await wait_for(lambda: service.launcher.run.mode == "safe"
                   and service.launcher.state is EngineState.READY, timeout=20, what="switch")
    await service.writer.flush()
    (tr,) = (await client.get("/api/transitions")).json()
    assert (tr["from_mode"], tr["to_mode"], tr["actor"]) == ("fast", "safe", "operator")
    st = (await client.get("/api/status")).json()
    assert (st["mode"], st["pinned"]) == ("safe", "safe")
    await client.post("/api/actions/unpin", headers=auth())
    assert (await client.get("/api/status")).json()["pinned"] is None


async def test_step_down_once_then_pause_and_resume(client, service) -> None:
    r = await client.post("/api/actions/step-down", headers=auth())
    assert r.json()["requested"] == "safe"
    await wait_for(lambda: service.ladder.rung == 1, timeout=10, what="step")
    assert service.ladder.state.requested is None and service.ladder.state.pinned is None
    r = await client.post("/api/actions/step-down", headers=auth())
    assert r.status_code == 409 and "no rung down" in r.json()["error"]["message"]
    assert (await client.post("/api/actions/pause", headers=auth())).json()["paused"] is True
    assert (await client.post("/api/actions/resume", headers=auth())).json()["paused"] is False


async def test_bad_requests(client) -> None:
    assert (await client.post("/api/actions/explode", headers=auth())).status_code == 404
    assert (await client.post("/api/actions/pin", headers=auth())).status_code == 422
    r = await client.post("/api/actions/pin", json={"mode": "nope"}, headers=auth())
    assert r.status_code == 422 and "no mode 'nope'" in r.json()["error"]["message"]


async def test_no_token_configured_refuses_actions(service) -> None:
    app = create_admin_app(service.status_view, token=None)
    async with AsyncClient(transport=ASGITransport(app), base_url="http://t") as c:
        r = await c.post("/api/actions/pause", headers=auth())
        assert r.status_code == 503 and "no admin token configured" in r.json()["error"]["message"]


async def test_off_loopback_reads_need_the_token_too(service) -> None:
    app = create_admin_app(service.status_view, token="tok")
    app.state.reads_open = False          # as when admin.host is 0.0.0.0
    async with AsyncClient(transport=ASGITransport(app), base_url="http://t") as c:
        assert (await c.get("/api/status")).status_code == 401
        assert (await c.get("/metrics")).status_code == 401
        ok = await c.get("/api/status", headers={"Authorization": "Bearer tok"})
        assert ok.status_code == 200

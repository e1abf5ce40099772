"""POST /api/actions/{action}: the token, and what each lever does for real."""

from __future__ import annotations

import pytest
from httpx import ASGITransport, AsyncClient

from agent_supervisor.show.api.app import create_admin_app
from agent_supervisor.show.api.deps import LOOPBACK_NAMES, allowed_host
from agent_supervisor.states import EngineState
from tests.helpers.admin_api import auth
from tests.helpers.waiting import wait_for


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
    async with AsyncClient(transport=ASGITransport(app), base_url="http://localhost") as c:
        r = await c.post("/api/actions/pause", headers=auth())
        assert r.status_code == 503 and "no admin token configured" in r.json()["error"]["message"]


async def test_off_loopback_reads_need_the_token_too(service) -> None:
    app = create_admin_app(service.status_view, token="tok")
    app.state.reads_open = False          # as when admin.host is 0.0.0.0
    async with AsyncClient(transport=ASGITransport(app), base_url="http://localhost") as c:
        assert (await c.get("/api/status")).status_code == 401
        assert (await c.get("/metrics")).status_code == 401
        ok = await c.get("/api/status", headers={"Authorization": "Bearer tok"})
        assert ok.status_code == 200


@pytest.mark.parametrize("header", [
    "Bearer \u00e9\u00e9\u00e9",          # non-ASCII: compare_digest raised TypeError -> 500
    "Bearer", "Bearer ", "bearer", "Basic dXNlcjpwYXNz", "Bearer a b c", "\u00ff" * 300,
])
async def test_issue_17_a_malformed_authorization_header_is_401_not_500(service, header) -> None:
    app = create_admin_app(service.status_view, token="tok")
    async with AsyncClient(transport=ASGITransport(app), base_url="http://localhost") as c:
        r = await c.post("/api/actions/pause", headers={"Authorization": header.encode("latin-1")})
        assert r.status_code == 401 and r.json()["src"] == "supervisor"


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1:8081", "[::1]:8081", "LOCALHOST."])
async def test_issue_17_the_admin_api_answers_its_loopback_names(client, host) -> None:
    assert (await client.get("/api/status", headers={"Host": host})).status_code == 200


def test_issue_17_allowed_hosts_from_the_policy() -> None:
    allowed = frozenset({*LOOPBACK_NAMES, "ops.example.internal"})
    assert allowed_host("ops.example.internal:8081", allowed)
    assert allowed_host("[::1]", allowed) and not allowed_host("[::2]:80", allowed)
    assert not allowed_host(None, allowed) and not allowed_host("evil.example", allowed)


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8081", "127.0.0.1.evil.example",
                                  "localhost.evil.example", ""])
async def test_issue_17_dns_rebinding_host_names_get_421(client, host) -> None:
    """A browser page on evil.example whose name resolves to 127.0.0.1 reaches the
    loopback API with its own name in Host: refused, reads and actions alike."""
    r = await client.get("/api/incidents", headers={"Host": host})
    assert r.status_code == 421 and r.json()["src"] == "supervisor"
    assert (await client.post("/api/actions/pause", headers={**auth(), "Host": host})
            ).status_code == 421

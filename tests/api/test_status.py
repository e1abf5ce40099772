"""GET /api/status."""

from __future__ import annotations


async def test_status_shows_mode_ladder_engine_and_last_decision(client, service) -> None:
    r = await client.get("/api/status")
    assert r.status_code == 200
    st = r.json()
    assert (st["fleet"], st["mode"], st["rung"]) == ("test", "fast", 0)
    assert [x["mode"] for x in st["ladder"]] == ["fast", "safe"]
    assert [x["current"] for x in st["ladder"]] == [True, False]
    assert st["engine_state"] == "ready" and st["engine_pid"] == service.launcher.run.pid
    assert st["last_decision"]["action"] in ("hold", "start")
    assert st["gateway"]["url"].endswith(f":{service.policy.gateway.port}/v1")
    assert st["paused"] is False and st["pinned"] is None


async def test_openapi_documents_every_route(client) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    for p in ("/api/status", "/api/incidents", "/api/incidents/{incident_id}",
              "/api/transitions", "/api/telemetry", "/api/actions/{action}", "/metrics"):
        assert p in paths, p

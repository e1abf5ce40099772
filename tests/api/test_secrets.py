"""Issue 34: the engine key reached ``/api/incidents`` through the incident's log tail
(masking missed an argument vector printed as a Python list). The running service,
its real SQLite record and its admin API."""

from __future__ import annotations

from datetime import UTC, datetime

from agent_supervisor.act.incident import Incident

KEY = "sk-live-0123456789abcdef"


async def test_issue_34_a_list_form_key_never_reaches_the_api(client, service) -> None:
    tail = ("Traceback (most recent call last):\n"
            f"subprocess.CalledProcessError: Command ['vllm', 'serve', '--api-key', '{KEY}', "
            "'--port', '8000'] returned non-zero exit status 1.\n"
            f'argv: ["--hf-token", "{KEY}"]\n')
    service.recorder.incident(Incident(
        kind="exited", severity="critical", started_at=datetime.now(UTC), action="restart",
        explanation=f"exited: ('--api-key', '{KEY}')", log_tail=tail,
        findings=[{"evidence": {"argv": ["vllm", "--api-key", KEY, "--port", "8000"]}}]))
    await service.writer.flush()
    listing = await client.get("/api/incidents")
    (inc,) = [i for i in listing.json() if i["kind"] == "exited"]
    detail = await client.get(f"/api/incidents/{inc['id']}")
    for body in (listing.text, detail.text):
        assert KEY not in body
    got = detail.json()
    assert "['vllm', 'serve', '--api-key', '***', '--port', '8000']" in got["log_tail"]
    assert '["--hf-token", "***"]' in got["log_tail"]
    assert got["findings"][0]["evidence"]["argv"] == ["vllm", "--api-key", "***", "--port",
                                                      "8000"]

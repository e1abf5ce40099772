"""Issue 31 item 4: readiness for load balancers, over real HTTP. The gateway answers
``/livez``, ``/ready`` and ``/readyz`` itself, without a key and never forwarded: ready
only while the engine serves and the supervisor has nothing against it; 503 with the
reason while starting, held, the engine down, or a verdict (hang suspected, reboot
required) is in force. Against the stand-in engine (a real process), in-process and
with ``supervisor run`` and its gateway process."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import httpx
import yaml
from prometheus_client import CollectorRegistry

from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.gateway.readiness import HEALTH_CACHE_SECONDS
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.runtime.gateway_link import GatewayLink, make_gateway, readiness_verdict
from agent_supervisor.runtime.levers import Ladder
from tests.helpers.gateway_process import gateway_url, wait
from tests.helpers.gateway_rig import Rig, engine_saw, start_engine, stop_engine
from tests.helpers.paths import FAKE_ENGINE
from tests.helpers.policies import fake_engine_policy
from tests.helpers.production import policy_file, start, status


def probe(c: httpx.Client | httpx.AsyncClient, url: str, path: str):
    return c.get(url + path, timeout=5)


async def test_issue_31_ready_follows_hold_verdict_and_the_engine(tmp_path: Path) -> None:
    key = hashlib.sha256(b"agent-a").hexdigest()
    async with Rig(tmp_path, modes=[{"name": "safe"}],
                   gateway={"auth": "keys", "api_keys": [{"name": "a", "sha256": key}]}
                   ) as rig, httpx.AsyncClient() as c:
        url, gw = rig.url, rig.gw
        # Serving: ready, without a key (the generation paths still want one).
        r = await probe(c, url, "/ready")
        assert (r.status_code, r.json()) == (200, {"ready": True, "reason": "serving (mode safe)",
                                                   "mode": "safe", "rung": 0, "held": False})
        assert (await probe(c, url, "/readyz")).status_code == 200
        assert (await c.get(url + "/v1/models")).status_code == 401
        # Held for a switch (the supervisor's hold): 503 with the reason.
        await gw.hold("restart: engine_exited", drain=False)
        r = await probe(c, url, "/readyz")
        assert r.status_code == 503
        assert r.json()["reason"] == "held: restart: engine_exited (mode safe)"
        assert r.json()["held"] is True
        assert (await probe(c, url, "/livez")).json() == {"live": True}
        gw.release(0)
        # The supervisor's verdict while the engine still answers (a suspected hang).
        gw.set_verdict("engine hang suspected (no progress; a canary is on its way)")
        r = await probe(c, url, "/ready")
        assert (r.status_code, r.json()["reason"]) == (
            503, "engine hang suspected (no progress; a canary is on its way) (mode safe)")
        gw.set_verdict(None)
        assert (await probe(c, url, "/ready")).status_code == 200
        # The engine gone with no supervisor to say so: its /health decides.
        stop_engine(rig.engine)
        await asyncio.sleep(HEALTH_CACHE_SECONDS)
        r = await probe(c, url, "/ready")
        assert (r.status_code, r.json()["reason"]) == (
            503, "engine not answering /health (mode safe)")
        assert (await probe(c, url, "/livez")).status_code == 200
        assert (await c.post(url + "/ready")).status_code == 405


async def test_issue_31_probes_start_not_ready_and_are_never_forwarded(
        tmp_path: Path) -> None:
    # /ready in extra_paths too: the gateway still answers it itself.
    rig = Rig(tmp_path, gateway={"extra_paths": ["/ready"]})
    rig.engine = start_engine(rig.policy.engine.port)
    await rig.gw.start()                               # held until release: starting
    try:
        async with httpx.AsyncClient() as c:
            r = await probe(c, rig.url, "/readyz")
            assert (r.status_code, r.json()["reason"]) == (
                503, "held: engine starting (mode fast)")
            assert (await probe(c, rig.url, "/livez")).status_code == 200
            rig.gw.release(0)
            for path in ("/ready", "/readyz", "/livez"):
                assert (await probe(c, rig.url, path)).status_code == 200
        assert not [p for _, p in engine_saw(rig) if p in ("/ready", "/readyz", "/livez")]
    finally:
        await rig.gw.stop()
        stop_engine(rig.engine)


def test_issue_31_the_verdict_comes_from_the_ladder() -> None:
    assert readiness_verdict(LadderState(rung=0)) is None
    assert readiness_verdict(LadderState(rung=0, reboot_required="gpu_lost")) == \
        "reboot required (gpu_lost)"
    suspected = LadderState(rung=1, shed=True, shed_kind="engine_hang_suspected")
    assert readiness_verdict(suspected).startswith("engine hang suspected")
    # A shed for load (not a hang) leaves the engine ready.
    assert readiness_verdict(LadderState(rung=1, shed=True, shed_kind="preemption_storm")) \
        is None


async def test_issue_31_the_ladders_verdict_reaches_the_probes(tmp_path: Path) -> None:
    # The supervisor's own gateway (make_gateway with its ladder: the gateway process,
    # from the policy the link writes for an in-memory one): a reboot required or a
    # suspected hang makes /ready 503 while the engine still answers (sent at the link's
    # next poll).
    policy = fake_engine_policy(tmp_path, modes=[{"name": "fast"}])
    ladder = Ladder(PolicyHolder(policy))
    gw = make_gateway(PolicyHolder(policy), CollectorRegistry(), None, ladder)
    assert isinstance(gw, GatewayLink)
    engine = start_engine(policy.engine.port)
    await gw.start()
    gw.release(0)
    url = f"http://127.0.0.1:{policy.gateway.port}"

    async def seen(c: httpx.AsyncClient, path: str, want: tuple[int, str | None]) -> tuple:
        """(status, reason) of ``path`` once it is ``want``, or the last one in 5 s."""
        for _ in range(100):
            r = await probe(c, url, path)
            got = (r.status_code, r.json().get("reason") if r.status_code == 503 else None)
            if got == want:
                break
            await asyncio.sleep(0.05)
        return got

    try:
        async with httpx.AsyncClient() as c:
            assert await seen(c, "/ready", (200, None)) == (200, None)
            ladder.state = replace(ladder.state, shed=True, shed_kind="engine_hang_suspected")
            hang = "engine hang suspected (no progress; a canary is on its way) (mode fast)"
            assert await seen(c, "/ready", (503, hang)) == (503, hang)
            ladder.state = replace(ladder.state, shed=False, shed_kind=None,
                                   reboot_required="gpu_lost")
            reboot = "reboot required (gpu_lost) (mode fast)"
            assert await seen(c, "/readyz", (503, reboot)) == (503, reboot)
    finally:
        await gw.stop()
        stop_engine(engine)


def test_issue_31_supervisor_run_ready_only_while_the_engine_serves(tmp_path: Path) -> None:
    path = policy_file(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["engine"]["args"] = [str(FAKE_ENGINE), "--ready-after", "3"]
    path.write_text(yaml.safe_dump(data))
    url = gateway_url(path)
    sup: subprocess.Popen | None = start(path)
    try:
        with httpx.Client() as c:
            starting = wait("the gateway answering not ready", lambda: (
                r := probe(c, url, "/readyz")).status_code == 503 and r.json())
            assert starting["reason"] == "held: engine starting (mode fast)"
            wait("ready", lambda: probe(c, url, "/ready").status_code == 200)
            # The engine killed: not ready until the supervisor's restart serves again.
            pid = status(path)["engine_pid"]
            subprocess.run(["kill", "-KILL", str(pid)], check=True)
            down = wait("not ready after the kill", lambda: (
                r := probe(c, url, "/ready")).status_code == 503 and r.json())
            assert down["mode"] == "fast" and down["ready"] is False
            wait("ready again", lambda: probe(c, url, "/ready").status_code == 200, 60)
            # The control link's verdict reaches the probes (as the supervisor's tick
            # sends it for a suspected hang or a reboot required).
            sock = tmp_path / "state" / "gateway.sock"
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock))) as ctl:
                ctl.post("http://gateway/control/verdict",
                         json={"reason": "reboot required (gpu_lost)"}).raise_for_status()
                r = probe(c, url, "/readyz")
                assert (r.status_code, r.json()["reason"]) == (
                    503, "reboot required (gpu_lost) (mode fast)")
                # The supervisor's next tick sends its own verdict (nothing against it).
                wait("the supervisor's verdict again",
                     lambda: probe(c, url, "/readyz").status_code == 200)
    finally:
        if sup is not None:
            sup.send_signal(signal.SIGTERM)
            sup.wait(30)

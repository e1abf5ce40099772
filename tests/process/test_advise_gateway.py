"""Issue 31 item 1's gateway while the supervisor only advises, over real HTTP against the
stand-in engine (real processes): an engine failure is passed on at once, as a plain
proxy would (the gateway used to wait ``hold_timeout_seconds`` for a restart that advise
mode never makes, then answer 503), a cut stream ends with its error event at once, and
``/ready`` says a hang the advised decision found. In-process, and with ``supervisor run``
in advise mode and its gateway process (the mode reaches it over the control link)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import httpx
import yaml

from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Finding, Severity
from agent_supervisor.policy import PolicyHolder
from agent_supervisor.runtime.gateway_wiring import follow
from agent_supervisor.runtime.levers import Ladder
from tests.helpers.gateway_process import gateway_url, wait
from tests.helpers.gateway_rig import Rig, chat, stop_engine
from tests.helpers.production import policy_file, start, status

#: The hold timeout these tests set: what a failure waited before the fix.
HOLD = 30
#: At once: under the gateway's grace before it asks a failed engine's /health (3 s,
#: ``NO_SWITCH_GRACE_SECONDS``), far under ``HOLD``.
NO_SWITCH_GRACE_SECONDS = 3.0


async def test_issue_31_advising_gateway_passes_a_failure_on_at_once(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "40", "--token-delay", "0.05",
                                          "--break-stream-after", "3"),
                   gateway={"hold_timeout_seconds": HOLD}) as rig, \
            httpx.AsyncClient(timeout=HOLD * 2) as c:
        rig.gw.advise = True                 # as POST /control/supervision {"mode": "advise"}
        # A stream cut by the engine's death: its error event at once, no resumption.
        t0 = time.monotonic()
        r = await c.post(rig.url + "/v1/chat/completions", json=chat(stream=True))
        cut = time.monotonic() - t0
        assert r.status_code == 200
        assert "the supervisor only advises" in r.text
        assert cut < NO_SWITCH_GRACE_SECONDS, f"the cut stream took {cut:.1f} s"
        # The engine gone: 503 at once, not after the hold timeout.
        assert rig.engine is not None
        stop_engine(rig.engine)
        t0 = time.monotonic()
        r = await c.post(rig.url + "/v1/chat/completions", json=chat())
        took = time.monotonic() - t0
        assert (r.status_code, r.json()["error"]["code"]) == (503, "engine_unavailable")
        assert took < NO_SWITCH_GRACE_SECONDS, f"the 503 took {took:.1f} s"


async def test_issue_31_ready_says_a_hang_found_while_advising(tmp_path: Path) -> None:
    async with Rig(tmp_path) as rig, httpx.AsyncClient(timeout=10) as c:
        advising = [True]
        hang = Decision(Action.SHED, 0, "no progress", findings=(Finding(
            guard="hang", kind="engine_hang_suspected", severity=Severity.WARNING,
            summary="no token for 16 s"),))
        last: list[Decision | None] = [hang]
        follow(rig.gw, Ladder(PolicyHolder(rig.policy)), lambda: advising[0],
               lambda: last[0])
        r = await c.get(rig.url + "/ready")
        assert (r.status_code, r.json()["reason"]) == (
            503, "engine hang suspected (advise mode: the supervisor would shed, and does "
            "nothing) (mode fast)")
        last[0] = Decision(Action.HOLD, 0, "healthy")        # the engine makes progress again
        assert (await c.get(rig.url + "/ready")).status_code == 200
        last[0], advising[0] = hang, False                   # acting: the ladder's shed says
        assert (await c.get(rig.url + "/ready")).status_code == 200


def test_issue_31_supervisor_advising_its_gateway_passes_failures_on(tmp_path: Path) -> None:
    path = policy_file(tmp_path, mode="advise", gateway={"hold_timeout_seconds": HOLD})
    url = gateway_url(path)
    sup: subprocess.Popen | None = start(path)
    try:
        with httpx.Client(timeout=HOLD * 2) as c:
            wait("ready", lambda: c.get(url + "/ready").status_code == 200, 60)
            state = tmp_path / "state"
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(state / "gateway.sock"))
                              ) as ctl:
                wait("advise mode sent to the gateway process", lambda: ctl.get(
                    "http://gateway/control/state").json()["advise"] is True)
            subprocess.run(["kill", "-KILL", str(status(path)["engine_pid"])], check=True)
            wait("the engine's port closed", lambda: _refused(c, path))
            t0 = time.monotonic()
            r = c.post(url + "/v1/chat/completions", json=chat())
            took = time.monotonic() - t0
            assert r.status_code == 503, r.text
            assert took < NO_SWITCH_GRACE_SECONDS, f"the 503 took {took:.1f} s"
    finally:
        if sup is not None:
            sup.send_signal(signal.SIGTERM)
            sup.wait(30)


def _refused(c: httpx.Client, path: Path) -> bool:
    port = yaml.safe_load(path.read_text())["engine"]["port"]
    try:
        c.get(f"http://127.0.0.1:{port}/health", timeout=1)
    except httpx.ConnectError:
        return True
    return False

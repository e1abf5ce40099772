"""Issue 31 item 5, failover while held, as production runs it: ``supervisor run`` (a real
process) with its gateway as its own process, the stand-in engine
(tests/helpers/fake_engine.py) as the local engine and a second stand-in on another port
as the declared fallback, real HTTP throughout, the record in SQLite.

Acceptance: while the local engine is held (starting, then SIGKILLed and restarting, each
for several seconds), no request fails and none waits longer than the bound plus a
tolerance; the answers say the fallback served them; the counter counts them; each
failover's start and end are incidents of kind ``failover`` in the database; once the
engine serves again requests go to it. A stream started on the local engine and cut by
its crash is resumed on the local engine, never sent to the fallback, although the
engine stays held past the bound (new requests meanwhile do go to the fallback)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import yaml

from agent_supervisor.policy import load_policy_file
from agent_supervisor.record.store import Store
from tests.helpers.gateway_process import gateway_url, wait
from tests.helpers.gateway_rig import Rig, chat, start_engine, stop_engine
from tests.helpers.paths import FAKE_ENGINE
from tests.helpers.ports import free_port
from tests.helpers.production import policy_file, start, status

#: The policy's bound: seconds held before requests go to the fallback.
BOUND = 2.0
#: Room on a loaded 2-core box: the supervisor seeing the crash (a tick: 0.2 s), the
#: gateway's hold, the fallback's answer, the client's own scheduling.
TOLERANCE = 3.0
SPARE_KEY = "sk-spare-0123456789"


def failover_policy(tmp_path: Path, spare_port: int, *, ready_after: float,
                    modes: list[dict] | None = None) -> Path:
    (tmp_path / "spare.key").write_text(SPARE_KEY + "\n")
    path = policy_file(
        tmp_path, restart={"restart_delay_seconds": 0},
        gateway={"failover_after_seconds": BOUND, "hold_timeout_seconds": 60,
                 "fallbacks": [
                     {"name": "down", "url": f"http://127.0.0.1:{free_port()}",
                      "api_key_env": "NOT_SET_ANYWHERE"},      # refused: the next is tried
                     {"name": "spare", "url": f"http://127.0.0.1:{spare_port}",
                      "api_key_file": "spare.key", "model": "spare-model"}]})
    data = yaml.safe_load(path.read_text())
    data["engine"]["args"] = [str(FAKE_ENGINE), "--ready-after", str(ready_after)]
    if modes is not None:
        data["modes"] = modes
    path.write_text(yaml.safe_dump(data))
    return path


def spare_saw(port: int) -> list:
    return httpx.get(f"http://127.0.0.1:{port}/debug/seen", timeout=5).json()["seen"]


def metric(state: Path, name: str) -> float:
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(state / "gateway.sock"))) as c:
        text = c.get("http://gateway/control/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name))


class Traffic:
    """Requests one after another from a thread: (status, seconds, served by, path)."""

    def __init__(self, url: str) -> None:
        self.url, self.results, self._stop = url, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=120) as c:
            i = 0
            while not self._stop.is_set():
                i += 1
                path, body = ("/v1/messages", {"model": "fake-model", "max_tokens": 20,
                                               "messages": [{"role": "user", "content": "hi"}]}
                              ) if i % 3 == 0 else ("/v1/chat/completions", chat("hi"))
                t0 = time.monotonic()
                try:
                    r = c.post(self.url + path, json=body)
                    self.results.append((r.status_code, time.monotonic() - t0,
                                         r.headers.get("x-supervisor-served-by"), path))
                except httpx.HTTPError as exc:
                    self.results.append((type(exc).__name__, time.monotonic() - t0, None, path))
                time.sleep(0.1)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.thread.join(150)


def failovers(path: Path) -> list:
    policy = load_policy_file(path)
    store = Store.open(policy.database_url, fleet=policy.fleet)
    return [i for i in store.incidents() if i.kind == "failover"]


def test_issue_31_requests_fail_over_while_held_and_come_back(tmp_path: Path) -> None:
    spare_port = free_port()
    spare = start_engine(spare_port, "--tokens", "7")
    path = failover_policy(tmp_path, spare_port, ready_after=6)
    url, state = gateway_url(path), tmp_path / "state"
    sup: subprocess.Popen | None = start(path)
    try:
        wait("the gateway process", lambda: httpx.get(url + "/livez", timeout=2)
             .status_code == 200)
        # 1. The engine starting (6 s): held, so requests go to the spare after the bound.
        with Traffic(url) as starting:
            wait("ready", lambda: httpx.get(url + "/ready", timeout=2).status_code == 200, 60)
            time.sleep(1.0)                         # a few answers from the local engine
        # 2. The engine SIGKILLed: held while the supervisor restarts it (6 s again).
        with Traffic(url) as restarting:
            time.sleep(0.5)
            subprocess.run(["kill", "-KILL", str(status(path)["engine_pid"])], check=True)
            wait("not ready", lambda: httpx.get(url + "/ready", timeout=2).status_code == 503)
            wait("ready again", lambda: httpx.get(url + "/ready", timeout=2).status_code
                 == 200, 60)
            time.sleep(1.0)
        for phase in (starting, restarting):
            results = phase.results
            assert results, "no request was sent"
            assert [r for r in results if r[0] != 200] == [], "a request failed"
            slowest = max(seconds for _, seconds, _, _ in results)
            assert slowest <= BOUND + TOLERANCE, f"a request waited {slowest:.1f} s"
            served = [by for _, _, by, _ in results]
            assert "spare" in served, "none failed over"
            assert served[-1] is None, "not back on the local engine"
            assert {p for _, _, by, p in results if by == "spare"} == {
                "/v1/chat/completions", "/v1/messages"}
        by_spare = sum(1 for ph in (starting, restarting) for r in ph.results if r[2] == "spare")
        for name, ph in (("starting", starting), ("restarting", restarting)):
            print(f"failover {name}: {len(ph.results)} requests, "
                  f"{sum(1 for r in ph.results if r[2] == 'spare')} by the spare, slowest "
                  f"{max(r[1] for r in ph.results):.2f} s (bound {BOUND} s)")
        # The counter counts them; the unreachable first fallback counts its failures.
        assert metric(state, 'supervisor_gateway_failover_requests_total{fallback="spare"}') \
            == by_spare
        assert metric(state, 'supervisor_gateway_failover_failures_total{fallback="down"}') \
            >= 2
        assert metric(state, 'supervisor_gateway_failover_requests_total{fallback="down"}') \
            == 0
        # The spare got its own key (from the file), the model the policy names, and never
        # the client's headers' key; the key is in no log.
        seen = httpx.get(f"http://127.0.0.1:{spare_port}/debug/models", timeout=5).json()
        assert {m for _, m in seen["models"]} == {"spare-model"}
        auth = httpx.get(f"http://127.0.0.1:{spare_port}/debug/last-auth", timeout=5).json()
        assert SPARE_KEY in (auth["authorization"] or "") + (auth["x-api-key"] or "")
        for log in (state / "gateway.log", tmp_path / "supervisor.log"):
            assert SPARE_KEY not in log.read_text()
        # On record: two failovers, each started (with the hold's reason) and ended.
        incidents = wait("the failovers recorded", lambda: (
            found := failovers(path)) and len(found) >= 4 and found)
        started = [i for i in incidents if i.outcome == "started"]
        ended = [i for i in incidents if i.outcome == "ended"]
        assert len(started) == len(ended) == 2
        reasons = [i.findings[0]["reason"] for i in sorted(started, key=lambda i: i.started_at)]
        assert reasons[0] == "engine starting" and reasons[1], reasons  # the restart's hold
        assert sum(i.findings[0]["requests"] for i in ended) == by_spare
    finally:
        if sup is not None:
            sup.send_signal(signal.SIGTERM)
            sup.wait(30)
        stop_engine(spare)


def test_issue_31_a_stream_from_the_local_engine_is_resumed_there(tmp_path: Path) -> None:
    spare_port = free_port()
    spare = start_engine(spare_port)
    modes = [{"name": "fast", "args": {"--tokens": 12, "--token-delay": 0.25}}]
    path = failover_policy(tmp_path, spare_port, ready_after=5, modes=modes)
    url = gateway_url(path)
    sup: subprocess.Popen | None = start(path)
    try:
        wait("ready", lambda: httpx.get(url + "/ready", timeout=2).status_code == 200, 60)
        before = len(spare_saw(spare_port))
        text = []
        with httpx.Client(timeout=120) as c, c.stream(
                "POST", url + "/v1/chat/completions", json=chat("hi", stream=True)) as r:
            assert r.status_code == 200 and "x-supervisor-served-by" not in r.headers
            lines = r.iter_lines()
            for line in lines:
                text.append(line)
                if line.startswith("data: ") and "w2 " in line:
                    break
            subprocess.run(["kill", "-KILL", str(status(path)["engine_pid"])], check=True)
            # Held past the bound: a new request goes to the spare meanwhile.
            wait("held", lambda: httpx.get(url + "/ready", timeout=2).status_code == 503)
            other = httpx.post(url + "/v1/chat/completions", json=chat("hi"), timeout=60)
            assert (other.status_code, other.headers.get("x-supervisor-served-by")) == (
                200, "spare")
            text.extend(lines)
        words = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                        for line in text if line.startswith("data: {")
                        and json.loads(line[6:])["choices"]).split()
        assert words == [f"w{i}" for i in range(12)]
        assert any(line.startswith(": supervisor resumed") for line in text)
        # The spare got the one new request, not the stream's continuation.
        assert spare_saw(spare_port)[before:] == [["POST", "/v1/chat/completions"]]
    finally:
        if sup is not None:
            sup.send_signal(signal.SIGTERM)
            sup.wait(30)
        stop_engine(spare)


async def test_issue_31_failed_fallbacks_leave_the_request_waiting_locally(
        tmp_path: Path) -> None:
    # In-process gateway (tests/helpers/gateway_rig.py): one fallback answers 500 to every
    # chat (the stand-in's --fail-every 1), the other is not listening. Held past the
    # bound, the request tries both, then goes on waiting and is answered by the local
    # engine once it serves; both failures are counted.
    broken_port = free_port()
    broken = start_engine(broken_port, "--fail-every", "1")
    fallbacks = [{"name": "broken", "url": f"http://127.0.0.1:{broken_port}",
                  "api_key_env": "NOT_SET_ANYWHERE"},
                 {"name": "down", "url": f"http://127.0.0.1:{free_port()}",
                  "api_key_env": "NOT_SET_ANYWHERE"}]
    try:
        async with Rig(tmp_path, gateway={"failover_after_seconds": 0.5,
                                          "fallbacks": fallbacks}) as rig, \
                httpx.AsyncClient(timeout=30) as c:
            await rig.gw.hold("restart: engine_exited", drain=False)
            asyncio.get_running_loop().call_later(2.0, rig.gw.release, 0)
            t0 = time.monotonic()
            r = await c.post(rig.url + "/v1/chat/completions", json=chat("hi"))
            took = time.monotonic() - t0
            assert r.status_code == 200
            assert "x-supervisor-served-by" not in r.headers       # the local engine's
            assert took >= 1.9 and float(r.headers["x-supervisor-held-seconds"]) >= 1.9
            for name in ("broken", "down"):
                assert rig.metric("supervisor_gateway_failover_failures_total"
                                  f'{{fallback="{name}"}}') >= 1
                assert rig.metric("supervisor_gateway_failover_requests_total"
                                  f'{{fallback="{name}"}}') == 0
            (started, ended) = rig.gw.failover.log.recent
            assert (started["event"], ended["event"]) == ("started", "ended")
            assert ended["requests"] == 0 and ended["failures"] >= 2
    finally:
        stop_engine(broken)


async def test_issue_31_a_request_the_crash_answered_500_fails_over(tmp_path: Path) -> None:
    # vLLM answers 500 (EngineDeadError) to the requests it holds when its EngineCore
    # dies, then exits (the stand-in's --die-with-500-at 1). The request has not started
    # streaming: it waits for the engine's return, raced against the failover, so once
    # the supervisor's hold (here the test's, 0.5 s after) is past the bound it is
    # answered by the spare, not after the hold timeout (10 s).
    spare_port = free_port()
    spare = start_engine(spare_port)
    fallbacks = [{"name": "spare", "url": f"http://127.0.0.1:{spare_port}",
                  "api_key_env": "NOT_SET_ANYWHERE"}]
    try:
        async with Rig(tmp_path, engine_args=("--die-with-500-at", "1"),
                       gateway={"failover_after_seconds": 0.5, "fallbacks": fallbacks}
                       ) as rig, httpx.AsyncClient(timeout=30) as c:
            asyncio.get_running_loop().call_later(
                0.5, lambda: asyncio.ensure_future(rig.gw.hold("restart: engine_exited",
                                                               drain=False)))
            t0 = time.monotonic()
            r = await c.post(rig.url + "/v1/chat/completions", json=chat("hi"))
            took = time.monotonic() - t0
            assert (r.status_code, r.headers.get("x-supervisor-served-by")) == (200, "spare")
            assert took < 5.0, f"answered after {took:.1f} s"
            assert spare_saw(spare_port) == [["POST", "/v1/chat/completions"]]
    finally:
        stop_engine(spare)


async def test_issue_31_failed_over_requests_go_straight_there_unqueued(tmp_path: Path) -> None:
    # max_held_requests 0: while held no request may queue (429). Once failed over, a new
    # request goes to the spare at once and is never queued, so it is not refused.
    spare_port = free_port()
    spare = start_engine(spare_port)
    fallbacks = [{"name": "spare", "url": f"http://127.0.0.1:{spare_port}",
                  "api_key_env": "NOT_SET_ANYWHERE"}]
    try:
        async with Rig(tmp_path, gateway={"failover_after_seconds": 0.5, "max_held_requests": 0,
                                          "fallbacks": fallbacks}) as rig, \
                httpx.AsyncClient(timeout=30) as c:
            await rig.gw.hold("restart: engine_exited", drain=False)
            early = await c.post(rig.url + "/v1/chat/completions", json=chat("hi"))
            assert (early.status_code, early.json()["error"]["code"]) == (429, "queue_full")
            await asyncio.sleep(0.6)
            t0 = time.monotonic()
            r = await c.post(rig.url + "/v1/chat/completions", json=chat("hi"))
            assert (r.status_code, r.headers.get("x-supervisor-served-by")) == (200, "spare")
            assert time.monotonic() - t0 < 2.0
    finally:
        stop_engine(spare)

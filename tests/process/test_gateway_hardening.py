"""Issue 17, the gateway's part, over real HTTP against the fake engine (a real process):
only allow-listed paths reach the engine, paths in other forms are refused, bodies and
headers are bounded, bad bodies get a 400 in the API's shape, the queue is bounded while
held, and work for clients that left is cancelled or never sent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from tests.helpers.gateway_rig import Rig, chat, engine_saw
from tests.helpers.paths import FAKE_ENGINE, ROOT
from tests.helpers.ports import free_port


async def raw_request(port: int, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """One request written byte for byte (httpx would normalize the path): status, body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head + body)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def post_head(path: bytes, length: int, extra: bytes = b"") -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + extra + b"Content-Length: " + str(length).encode() + b"\r\n\r\n")


async def test_issue_17_engine_admin_paths_never_reach_the_engine(tmp_path: Path) -> None:
    admin = ["/sleep", "/wake_up", "/collective_rpc", "/v1/load_lora_adapter",
             "/v1/unload_lora_adapter", "/scale_elastic_ep", "/server_info",
             "/reset_prefix_cache", "/pause", "/update_weights", "/start_profile"]
    async with Rig(tmp_path, gateway={"extra_paths": ["/sleep", "/v1/chat/completions/render"]}
                   ) as rig, httpx.AsyncClient() as c:
        for path in admin:
            r = await c.post(rig.url + path, json={})
            assert r.status_code == 404, path
            assert r.json()["error"]["code"] == "path_not_forwarded"
            assert r.json()["src"] == "supervisor"
        # An operator's extra path is forwarded (the fake engine answers 404 itself).
        r = await c.post(rig.url + "/v1/chat/completions/render", json={})
        assert r.status_code == 404 and "src" not in r.json()
        assert (await c.get(rig.url + "/v1/models")).status_code == 200
        seen = [p for _, p in engine_saw(rig)]
        assert seen == ["/v1/chat/completions/render", "/v1/models"]   # no admin path at all


@pytest.mark.parametrize("path", [b"/v1/./chat/completions", b"//v1/chat/completions",
                                  b"/v1/chat%2Fcompletions", b"/v1/x/../chat/completions",
                                  b"/v1/%2e/chat/completions", b"/v1\\chat/completions"])
async def test_issue_17_paths_not_in_normal_form_get_400(tmp_path: Path, path: bytes) -> None:
    async with Rig(tmp_path) as rig:
        body = json.dumps(chat(" ".join(["word"] * 30))).encode()   # over the prompt limit
        status, reply = await raw_request(rig.policy.gateway.port,
                                          post_head(path, len(body)), body)
        assert status == 400
        assert json.loads(reply)["error"]["code"] == "path_not_normal"
        assert engine_saw(rig) == []


async def test_issue_17_a_body_over_the_cap_gets_413_in_the_callers_shape(
        tmp_path: Path) -> None:
    async with Rig(tmp_path, gateway={"max_body_bytes": 100_000}) as rig:
        port = rig.policy.gateway.port
        # Declared too large: refused before a byte of it is read.
        status, reply = await raw_request(port, post_head(b"/v1/chat/completions",
                                                          100 * 1024 * 1024))
        assert status == 413
        assert json.loads(reply)["error"]["code"] == "request_too_large"
        status, reply = await raw_request(port, post_head(b"/v1/messages", 100 * 1024 * 1024))
        assert status == 413 and json.loads(reply)["error"]["type"] == "request_too_large"
        assert json.loads(reply)["type"] == "error"
        # Chunked, no length said: refused once the cap is passed.
        chunk = b"2710\r\n" + b"x" * 10_000 + b"\r\n"
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        status, reply = await raw_request(port, head, chunk * 11 + b"0\r\n\r\n")
        assert status == 413
        assert engine_saw(rig) == []


async def test_issue_17_bad_bodies_get_400_in_the_apis_shape_not_500(tmp_path: Path) -> None:
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    cases = [b'{"messages": 5}', deep, b'{"prompt": "caf\xe9"}', b"not json", b"[1, 2]",
             b'{"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}', b""]
    async with Rig(tmp_path) as rig, httpx.AsyncClient() as c:
        for raw in cases:
            r = await c.post(rig.url + "/v1/chat/completions", content=raw,
                             headers={"content-type": "application/json"})
            assert r.status_code == 400, (raw[:40], r.text)
            assert r.json()["error"]["code"] == "invalid_request_body"
            r = await c.post(rig.url + "/v1/messages", content=raw)
            assert r.status_code == 400
            assert r.json()["type"] == "error"
            assert r.json()["error"]["type"] == "invalid_request_error"
        assert engine_saw(rig) == []


async def test_issue_17_the_queue_is_bounded_while_held(tmp_path: Path) -> None:
    async with Rig(tmp_path, gateway={"max_held_requests": 3, "max_queued_bytes": 4000}) as rig, \
            httpx.AsyncClient(timeout=30) as c:
        await rig.gw.hold("switch", drain=False)
        held = [asyncio.create_task(c.post(rig.url + "/v1/chat/completions", json=chat()))
                for _ in range(3)]
        await asyncio.sleep(0.5)
        assert rig.gw.gateway_load().requests_queued == 3
        r = await c.post(rig.url + "/v1/chat/completions", json=chat())
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
        rig.gw.release(0)
        assert [(await t).status_code for t in held] == [200, 200, 200]
        # In bytes: one 3 KB body queued fits, a second does not.
        await rig.gw.hold("switch", drain=False)
        big = chat("x" * 3000)
        first = asyncio.create_task(c.post(rig.url + "/v1/completions", json={
            "model": "m", "prompt": "x" * 3000}))
        await asyncio.sleep(0.5)
        r = await c.post(rig.url + "/v1/chat/completions", json=big)
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_bytes"
        rig.gw.release(0)
        assert (await first).status_code == 200


async def test_issue_17_a_client_that_leaves_cancels_its_request_upstream(
        tmp_path: Path) -> None:
    modes = [{"name": "fast", "gateway": {"max_concurrency": 1, "max_queue": 4,
                                          "queue_timeout_seconds": 30}}]
    async with Rig(tmp_path, modes=modes,
                   engine_args=("--tokens", "10", "--token-delay", "0.3")) as rig:
        # A: non-streaming, 3 s of work; its client leaves after 0.5 s.
        with pytest.raises(httpx.ReadTimeout):
            async with httpx.AsyncClient(timeout=0.5) as impatient:
                await impatient.post(rig.url + "/v1/chat/completions", json=chat())
        await asyncio.sleep(0.5)
        seen = httpx.get(f"http://127.0.0.1:{rig.policy.engine.port}/debug/seen").json()
        assert seen["aborted"] == 1                    # the engine stopped working for nobody
        assert rig.gw.admission.in_flight == 0
        # B holds the one slot; C queues behind it and leaves: C is never sent.
        async with httpx.AsyncClient(timeout=30) as c:
            b = asyncio.create_task(c.post(rig.url + "/v1/chat/completions",
                                           json=chat(max_tokens=4)))
            await asyncio.sleep(0.3)
            with pytest.raises(httpx.ReadTimeout):
                async with httpx.AsyncClient(timeout=0.5) as impatient:
                    await impatient.post(rig.url + "/v1/chat/completions", json=chat())
            assert (await b).status_code == 200
        await asyncio.sleep(0.3)
        assert [p for _, p in engine_saw(rig)] == ["/v1/chat/completions"] * 2
        assert rig.metric('supervisor_gateway_requests_total{outcome="client_disconnected"}') == 2
        assert rig.metric('supervisor_gateway_requests_total{outcome="upstream_error"}') == 0


async def test_issue_14_a_client_that_leaves_mid_stream_ends_its_request_upstream(
        tmp_path: Path) -> None:
    """The gateway's connection protocol cancels the request when its client goes
    (no task listens for it): the engine's connection is closed (it aborts the
    request), the slot comes back, and it counts as client_disconnected."""
    modes = [{"name": "fast", "gateway": {"max_concurrency": 1, "max_queue": 4}}]
    async with Rig(tmp_path, modes=modes,
                   engine_args=("--tokens", "40", "--token-delay", "0.1")) as rig:
        async with httpx.AsyncClient(timeout=30) as c, \
                c.stream("POST", rig.url + "/v1/chat/completions",
                         json=chat(stream=True)) as r:
            lines = r.aiter_lines()
            while not (await anext(lines)).startswith("data: {"):
                pass                                     # one event read, then gone
        await asyncio.sleep(1.0)
        seen = httpx.get(f"http://127.0.0.1:{rig.policy.engine.port}/debug/seen").json()
        assert seen["aborted"] == 1                    # the engine stopped working for nobody
        assert rig.gw.admission.in_flight == 0
        assert rig.metric('supervisor_gateway_requests_total{outcome="client_disconnected"}') == 1
        assert rig.metric('supervisor_gateway_requests_total{outcome="upstream_error"}') == 0
        async with httpx.AsyncClient(timeout=30) as c:
            again = await c.post(rig.url + "/v1/chat/completions", json=chat())
        assert again.status_code == 200


async def test_issue_17_a_header_that_never_ends_is_cut_at_the_cap(tmp_path: Path) -> None:
    async with Rig(tmp_path) as rig:
        port = rig.policy.gateway.port
        status, _ = await raw_request(port, b"GET /v1/models HTTP/1.1\r\nX-Long: "
                                      + b"a" * 100_000)
        assert status == 431
        proc = psutil.Process()
        before = proc.memory_info().rss
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/models HTTP/1.1\r\nX-Long: ")
        sent = 0
        with contextlib.suppress(ConnectionError):
            while sent < 200 * 1024 * 1024:                     # up to 200 MiB
                writer.write(b"a" * (1024 * 1024))
                await writer.drain()
                sent += 1024 * 1024
        writer.close()
        assert sent < 16 * 1024 * 1024                    # cut off, not read to the end
        assert proc.memory_info().rss - before < 32 * 1024 * 1024


FLOOD = 1100


def test_issue_17_slow_header_flood_under_ulimit_1024_leaves_admin_and_ticks(
        tmp_path: Path) -> None:
    """1,100 connections that never finish their headers, against ``supervisor run``
    under ``ulimit -n 1024`` (systemd's default LimitNOFILE): the admin API answers,
    ticks go on, agents are served, and the slow connections are closed."""
    gw_port, admin_port = free_port(), free_port()
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump({
        "fleet": "flood", "engine": {"executable": sys.executable, "port": free_port(),
                                     "args": [str(FAKE_ENGINE), "--no-core"],
                                     "shutdown_timeout_seconds": 1},
        "modes": [{"name": "only"}], "storage": {"state_directory": str(tmp_path / "s")},
        "gateway": {"port": gw_port, "header_timeout_seconds": 4},
        "admin": {"port": admin_port}}))
    proc = subprocess.Popen(["bash", "-c", f"ulimit -n 1024 && exec {sys.executable} -m "
                             f"agent_supervisor run --policy {policy}"], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    socks: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{gw_port}/gateway/health").json()[
                        "engine_ready"]:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "supervisor did not start"
            time.sleep(0.3)
        for _ in range(FLOOD):
            s = socket.create_connection(("127.0.0.1", gw_port))
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: a")
            socks.append(s)
        time.sleep(1.0)
        t0 = time.monotonic()
        status = httpx.get(f"http://127.0.0.1:{admin_port}/api/status", timeout=5).json()
        assert time.monotonic() - t0 < 2.0
        assert status["last_decision_seconds_ago"] is not None
        assert status["last_decision_seconds_ago"] < 5
        # Past the header timeout the slow ones are gone and an agent is served.
        time.sleep(4.5)
        ok = httpx.post(f"http://127.0.0.1:{gw_port}/v1/chat/completions", json=chat(),
                        timeout=10)
        assert ok.status_code == 200
        closed = 0
        for s in socks:
            s.settimeout(0.01)
            try:
                closed += s.recv(100) != b"" or 1
            except (TimeoutError, BlockingIOError):
                pass
            except OSError:
                closed += 1
        assert closed == FLOOD
        assert proc.poll() is None
    finally:
        for s in socks:
            s.close()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()

"""Issue 34, the gateway's listener and prompt count, over real HTTP against the stand-in
engine: an agent that never reads its stream no longer holds its concurrency slot (write
timeout), unauthenticated connections that trickle a body after their 401 no longer lock
agents out, and a prompt sent as token ids counts against ``max_prompt_tokens``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path

import httpx

from tests.helpers.flood import CHAT_BODY, close_all, closed, open_many, post_head, trickle
from tests.helpers.gateway_rig import Rig, chat

ONE_SLOT = [{"name": "fast", "gateway": {"max_concurrency": 1, "max_queue": 1,
                                         "queue_timeout_seconds": 30}}]


async def test_issue_34_an_agent_that_never_reads_its_stream_frees_its_slot(
        tmp_path: Path) -> None:
    # 20,000 chunks of 2 KB: far more than the sockets' buffers hold.
    async with Rig(tmp_path, modes=ONE_SLOT, gateway={"write_timeout_seconds": 1},
                   engine_args=("--tokens", "20000", "--word", "x" * 2000)) as rig:
        body = json.dumps(chat(stream=True)).encode()
        address = ("127.0.0.1", rig.policy.gateway.port)
        stalled = await asyncio.to_thread(open_many, address, 1,
                                          post_head("/v1/chat/completions", len(body)) + body,
                                          rcvbuf=4096)
        try:
            await asyncio.sleep(1.0)
            assert rig.gw.admission.in_flight == 1         # the stalled stream holds it
            t0 = time.monotonic()
            async with httpx.AsyncClient(timeout=60) as c:
                r = await c.post(rig.url + "/v1/chat/completions", json=chat())
            assert r.status_code == 200                    # before: 429 queue_timeout
            assert time.monotonic() - t0 < 20
            assert rig.metric(
                'supervisor_gateway_requests_total{outcome="client_disconnected"}') == 1
        finally:
            close_all(stalled)


async def test_issue_34_trickled_bodies_after_a_401_do_not_lock_agents_out(
        tmp_path: Path) -> None:
    key = "agent-key-34"
    digest = hashlib.sha256(key.encode()).hexdigest()
    async with Rig(tmp_path, gateway={"auth": "keys", "max_connections": 40, "api_keys": [
            {"name": "agent", "sha256": digest}]}) as rig:
        address = ("127.0.0.1", rig.policy.gateway.port)

        def flood() -> tuple[int, int]:
            socks = open_many(address, 80, post_head("/v1/chat/completions", 10**6) + b"{")
            trickle(socks)
            s = open_many(address, 1, post_head("/v1/chat/completions", len(CHAT_BODY),
                                                key=key) + CHAT_BODY)[0]
            s.settimeout(10)
            status = int(s.recv(65536).split(b" ", 2)[1])
            s.close()
            time.sleep(3)                      # past the 2 s lingering of each 401
            trickle(socks)
            gone = sum(closed(x, 0.5) for x in socks)
            close_all(socks)
            return status, gone

        status, gone = await asyncio.to_thread(flood)
        assert status == 200
        assert gone == 80                      # before: kept alive as long as they trickled


async def test_issue_34_a_prompt_of_token_ids_counts_against_max_prompt_tokens(
        tmp_path: Path) -> None:
    async with Rig(tmp_path) as rig, httpx.AsyncClient() as c:   # max_prompt_tokens: 10
        for prompt in (list(range(50)), [list(range(6)), list(range(6))]):
            r = await c.post(rig.url + "/v1/completions", json={"model": "fake-model",
                                                                "prompt": prompt})
            assert r.status_code == 400, prompt        # before: 200 (counted as 1 token)
            error = r.json()["error"]
            assert error["code"] == "context_length_exceeded"
            assert f"has {sum(len(p) if isinstance(p, list) else 1 for p in prompt)} tokens" \
                in error["message"]
        r = await c.post(rig.url + "/v1/completions", json={"model": "fake-model",
                                                            "prompt": [1, 2, 3]})
        assert r.status_code == 200

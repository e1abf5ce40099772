"""The gateway over real HTTP against the fake engine (a real process): the OpenAI SDK
unchanged but for its base URL, admission limits, the prompt limit, holding requests
across a switch, one retry, a broken stream's error event, per-agent keys."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path

import httpx
import openai
import pytest

from agent_supervisor.gateway.proxy import HEALTHY_500_SECONDS
from tests.helpers.gateway_rig import Rig, chat, engine_saw, start_engine, stop_engine


async def test_openai_sdk_streams_and_non_streams_through_the_gateway(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "6")) as rig:
        client = openai.AsyncOpenAI(base_url=rig.url + "/v1", api_key="unused")
        reply = await client.chat.completions.create(model="fake-model", messages=[
            {"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "w0 w1 w2 w3 w4 w5"
        assert reply.usage.completion_tokens == 6
        stream = await client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True})
        text = ""
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
        assert text == "w0 w1 w2 w3 w4 w5 "
        models = await client.models.list()
        assert [m.id for m in models.data] == ["fake-model"]
        await client.close()
        assert rig.metric('supervisor_gateway_requests_total{outcome="ok"}') == 3


async def test_stream_chunks_are_passed_on_as_they_come(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "4", "--token-delay", "0.3")) as rig:
        arrivals = []
        async with httpx.AsyncClient() as c, c.stream(
                "POST", rig.url + "/v1/chat/completions", json=chat(stream=True)) as r:
            t0 = time.monotonic()
            async for line in r.aiter_lines():
                if line.startswith("data: {") and '"content"' in line:
                    arrivals.append(time.monotonic() - t0)
        assert len(arrivals) == 4
        # Not buffered: the first word arrives long before the last.
        assert arrivals[-1] - arrivals[0] > 0.6


async def test_concurrency_queue_and_429_with_retry_after(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "4", "--token-delay", "0.5")) as rig:
        async with httpx.AsyncClient(timeout=30) as c:
            async def one():
                return await c.post(rig.url + "/v1/chat/completions", json=chat())
            tasks = [asyncio.create_task(one()) for _ in range(4)]
            await asyncio.sleep(0.3)
            load = rig.gw.gateway_load()
            assert (load.requests_in_flight, load.requests_queued) == (2, 1)
            results = await asyncio.gather(*tasks)
        codes = sorted(r.status_code for r in results)
        # 2 in flight, 1 queued but timed out after 1 s (the others take 2 s), 1 refused.
        assert codes == [200, 200, 429, 429]
        refused = [r for r in results if r.status_code == 429]
        assert {r.json()["error"]["code"] for r in refused} == {"queue_full", "queue_timeout"}
        assert all(r.json()["src"] == "supervisor" and r.headers["retry-after"] for r in refused)


async def test_prompt_over_the_mode_limit_gets_a_400_naming_it(tmp_path: Path) -> None:
    async with Rig(tmp_path) as rig, httpx.AsyncClient() as c:
        long = " ".join(["word"] * 30)
        r = await c.post(rig.url + "/v1/chat/completions", json=chat(long))
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["code"] == "context_length_exceeded" and err["param"] == "messages"
        assert "30 tokens" in err["message"] and "at most 10 prompt tokens" in err["message"]
        ok = await c.post(rig.url + "/v1/chat/completions", json=chat("short"))
        assert ok.status_code == 200


async def test_requests_held_during_a_switch_complete_on_the_new_engine(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "3", "--token-delay", "0.2")) as rig, \
            httpx.AsyncClient(timeout=30) as c:
        first = asyncio.create_task(c.post(rig.url + "/v1/chat/completions", json=chat()))
        await asyncio.sleep(0.2)
        # The switch: hold (drain the one in flight), stop the old engine, start a new one.
        await rig.gw.hold("switch", drain=True)
        assert (await first).status_code == 200
        held = asyncio.create_task(c.post(rig.url + "/v1/chat/completions", json=chat()))
        await asyncio.sleep(0.3)
        assert not held.done() and rig.gw.gateway_load().requests_queued == 1
        stop_engine(rig.engine)
        rig.engine = start_engine(rig.policy.engine.port, *rig.engine_args)
        rig.gw.release(0)
        r = await held
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]


async def test_non_streaming_request_lost_in_a_crash_is_retried_once(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "3", "--token-delay", "0.5")) as rig, \
            httpx.AsyncClient(timeout=30) as c:
        req = asyncio.create_task(c.post(rig.url + "/v1/chat/completions", json=chat()))
        await asyncio.sleep(0.3)
        await rig.gw.hold("crash", drain=False)
        stop_engine(rig.engine)                       # the request's connection breaks
        await asyncio.sleep(0.3)
        rig.engine = start_engine(rig.policy.engine.port, "--tokens", "2")
        rig.gw.release(0)
        r = await req
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "w0 w1"
        assert rig.metric("supervisor_gateway_retries_total") == 1


async def test_issue_14_a_crash_500_with_no_hold_is_sent_again_on_the_next_engine(
        tmp_path: Path) -> None:
    """vLLM answers 500 to a request it holds when its EngineCore dies and exits 0.6 s
    later; no supervisor holds the gateway (away, or its tick not yet run). /health no
    longer answering says it was a crash: the request waits and goes to the next engine
    (it used to wait 3 s for a hold that never came, then pass the 500 on)."""
    async with Rig(tmp_path, engine_args=("--die-with-500-at", "1")) as rig, \
            httpx.AsyncClient(timeout=30) as c:
        req = asyncio.create_task(c.post(rig.url + "/v1/chat/completions", json=chat()))
        await asyncio.to_thread(rig.engine.wait, 10)         # the engine has exited
        await asyncio.sleep(1.0)                             # and is started again
        rig.engine = start_engine(rig.policy.engine.port, "--tokens", "2")
        r = await req
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "w0 w1"
        assert rig.metric("supervisor_gateway_retries_total") == 1


async def test_issue_14_a_healthy_engines_own_500_is_passed_on_once(tmp_path: Path) -> None:
    """/health answering 200 throughout: the engine's own 500 goes to the client, sent
    once, after HEALTHY_500_SECONDS of asking (a lower bound only: a busy box is slow)."""
    async with Rig(tmp_path, engine_args=("--fail-every", "1")) as rig, \
            httpx.AsyncClient(timeout=30) as c:
        t0 = time.monotonic()
        r = await c.post(rig.url + "/v1/chat/completions", json=chat())
        waited = time.monotonic() - t0
        print(f"\nthe engine's own 500 passed on after {waited:.2f} s")
        assert r.status_code == 500 and "parse" in r.json()["error"]["message"]
        assert waited >= HEALTHY_500_SECONDS
        assert [p for _, p in engine_saw(rig) if p != "/tokenize"] == ["/v1/chat/completions"]
        assert rig.metric("supervisor_gateway_retries_total") == 0


async def test_a_stream_broken_mid_way_ends_with_an_sse_error_event(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "6", "--break-stream-after", "2"),
                   gateway={"resume": False}) as rig:
        async with httpx.AsyncClient() as c, c.stream(
                "POST", rig.url + "/v1/chat/completions", json=chat(stream=True)) as r:
            lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
        words = [x for x in lines if '"content"' in x]
        assert len(words) == 2
        error = json.loads(lines[-2][6:])
        assert error["error"]["code"] == "engine_stream_broken" and error["src"] == "supervisor"
        assert lines[-1] == "data: [DONE]"
        assert rig.metric('supervisor_gateway_requests_total{outcome="broken_stream"}') == 1


async def test_per_agent_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINE_KEY", "engine-secret")
    digest = hashlib.sha256(b"agent-secret").hexdigest()
    async with Rig(tmp_path, gateway={"auth": "keys", "upstream_api_key_env": "ENGINE_KEY",
                                      "api_keys": [{"name": "a", "sha256": digest}]}) as rig, \
            httpx.AsyncClient() as c:
        anon = await c.post(rig.url + "/v1/chat/completions", json=chat())
        wrong = await c.post(rig.url + "/v1/chat/completions", json=chat(),
                             headers={"Authorization": "Bearer other-fleet"})
        assert anon.status_code == wrong.status_code == 401
        assert anon.json()["error"]["code"] == "invalid_api_key"
        ok = await c.post(rig.url + "/v1/chat/completions", json=chat(),
                          headers={"Authorization": "Bearer agent-secret"})
        assert ok.status_code == 200
        seen = httpx.get(f"http://127.0.0.1:{rig.policy.engine.port}/debug/last-auth").json()
        assert seen["authorization"] == "Bearer engine-secret"   # the agent's key stays here


async def test_shed_halves_the_limits_and_release_applies_the_new_mode(tmp_path: Path) -> None:
    modes = [{"name": "fast", "gateway": {"max_concurrency": 8, "max_queue": 4}},
             {"name": "safe", "args": {"--max-num-seqs": 1},
              "gateway": {"max_concurrency": 2, "max_queue": 2}}]
    async with Rig(tmp_path, modes=modes) as rig:
        assert rig.gw.admission.max_concurrency == 8
        rig.gw.set_shed(True)
        assert rig.gw.admission.max_concurrency == 4
        rig.gw.release(1)
        assert (rig.gw.admission.max_concurrency, rig.gw.mode_name) == (2, "safe")


async def test_a_client_gone_before_its_stream_starts_gives_its_slot_back(tmp_path: Path) -> None:
    modes = [{"name": "fast", "gateway": {"max_concurrency": 1, "max_queue": 4,
                                          "queue_timeout_seconds": 30}}]
    async with Rig(tmp_path, modes=modes,
                   engine_args=("--tokens", "4", "--token-delay", "0.3")) as rig, \
            httpx.AsyncClient(timeout=30) as c:
        first = asyncio.create_task(c.post(rig.url + "/v1/chat/completions",
                                           json=chat(stream=True)))
        await asyncio.sleep(0.2)
        # B queues behind A, then its client gives up while still queued.
        with pytest.raises(httpx.ReadTimeout):
            async with httpx.AsyncClient(timeout=0.5) as impatient:
                await impatient.post(rig.url + "/v1/chat/completions",
                                     json=chat(stream=True))
        assert (await first).status_code == 200
        await asyncio.sleep(1.5)
        assert rig.gw.admission.in_flight == 0          # B's slot came back
        again = await c.post(rig.url + "/v1/chat/completions", json=chat())
        assert again.status_code == 200

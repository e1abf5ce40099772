"""Issue 14 against the fake engine (a real process): every generation path admitted and
held, the prompt estimate, both key headers, errors in the caller's shape, and streams cut
by an engine crash resumed on the next engine as one unbroken stream."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from agent_supervisor.gateway.paths import ADMITTED
from agent_supervisor.gateway.prompt import estimate_tokens
from tests.helpers.gateway_rig import Rig, chat, start_engine, stop_engine


@pytest.mark.parametrize("path", sorted(ADMITTED))
async def test_issue_14_every_generation_path_is_admitted_and_held(tmp_path: Path,
                                                                   path: str) -> None:
    async with Rig(tmp_path) as rig, httpx.AsyncClient(timeout=30) as c:
        await rig.gw.hold("switch", drain=False)
        body = {"model": "fake-model", "input": "hi"} if "audio" not in path else None
        req = asyncio.create_task(c.post(rig.url + path, json=body) if body else
                                  c.post(rig.url + path, files={"file": b"RIFF"}))
        await asyncio.sleep(0.4)
        assert not req.done() and rig.gw.gateway_load().requests_queued == 1, path
        rig.gw.release(0)
        r = await req
        # Forwarded: the fake engine answers itself (it knows none of these paths).
        assert r.status_code in (200, 400, 404) and "supervisor" not in r.text


def test_issue_14_the_estimate_counts_input_system_tools_and_tool_choice() -> None:
    tools = [{"type": "function", "function": {"name": "read_file", "description": "x" * 400,
                                               "parameters": {"type": "object"}}}]
    assert estimate_tokens({"input": "y" * 400}) == 101
    assert estimate_tokens({"messages": [], "system": "z" * 400}) == 101
    assert estimate_tokens({"messages": [{"role": "user", "content": "hi"}],
                            "tools": tools}) > 100
    assert estimate_tokens({"tool_choice": {"type": "function",
                                            "function": {"name": "n" * 400}}}) > 100
    assert estimate_tokens({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "q" * 800}]}]}) > 200


async def test_issue_14_x_api_key_and_bearer_both_accepted(tmp_path: Path,
                                                           monkeypatch) -> None:
    monkeypatch.setenv("ENGINE_KEY", "engine-secret")
    digest = hashlib.sha256(b"agent-secret").hexdigest()
    async with Rig(tmp_path, gateway={"auth": "keys", "upstream_api_key_env": "ENGINE_KEY",
                                      "api_keys": [{"name": "a", "sha256": digest}]}) as rig, \
            httpx.AsyncClient() as c:
        ok = await c.post(rig.url + "/v1/chat/completions", json=chat(),
                          headers={"x-api-key": "agent-secret"})
        assert ok.status_code == 200
        seen = httpx.get(f"http://127.0.0.1:{rig.policy.engine.port}/debug/last-auth").json()
        assert seen["authorization"] == "Bearer engine-secret"
        ok = await c.post(rig.url + "/v1/chat/completions", json=chat(),
                          headers={"Authorization": "Bearer agent-secret"})
        assert ok.status_code == 200
        # Anthropic's SDK: x-api-key; a wrong key is refused in Anthropic's shape.
        client = anthropic.AsyncAnthropic(base_url=rig.url, api_key="other-fleet",
                                          max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as err:
            await client.messages.create(model="fake-model", max_tokens=5, messages=[
                {"role": "user", "content": "hi"}])
        assert err.value.body["type"] == "error"
        assert err.value.body["error"]["type"] == "authentication_error"
        await client.close()


async def test_issue_14_errors_come_in_the_callers_api_shape(tmp_path: Path) -> None:
    modes = [{"name": "fast", "gateway": {"max_concurrency": 1, "max_queue": 0,
                                          "max_prompt_tokens": 10}}]
    async with Rig(tmp_path, modes=modes,
                   engine_args=("--tokens", "4", "--token-delay", "0.3")) as rig:
        client = anthropic.AsyncAnthropic(base_url=rig.url, api_key="k", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as err:
            await client.messages.create(model="fake-model", max_tokens=5, system="s " * 200,
                                         messages=[{"role": "user", "content": "hi"}])
        assert err.value.body["error"]["type"] == "invalid_request_error"
        assert "prompt tokens" in err.value.body["error"]["message"]
        oa = openai.AsyncOpenAI(base_url=rig.url + "/v1", api_key="k", max_retries=0)
        busy = asyncio.create_task(oa.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}]))
        await asyncio.sleep(0.3)
        with pytest.raises(anthropic.RateLimitError) as err:
            await client.messages.create(model="fake-model", max_tokens=5,
                                         messages=[{"role": "user", "content": "hi"}])
        assert err.value.body["error"]["type"] == "rate_limit_error"
        with pytest.raises(openai.RateLimitError) as oerr:
            await oa.chat.completions.create(model="fake-model", messages=[
                {"role": "user", "content": "hi"}])
        assert oerr.value.body["code"] == "queue_full"
        await busy
        await client.close()
        await oa.close()


async def test_issue_14_messages_are_admitted_and_streamed_not_buffered(tmp_path: Path) -> None:
    # /v1/messages used to be passed through unadmitted and read to the end before the
    # client saw a byte; the engine's text/event-stream now decides, chunk by chunk.
    async with Rig(tmp_path, engine_args=("--tokens", "4", "--token-delay", "0.3")) as rig:
        client = anthropic.AsyncAnthropic(base_url=rig.url, api_key="k", max_retries=0)
        arrivals = []
        async with client.messages.stream(model="fake-model", max_tokens=5, messages=[
                {"role": "user", "content": "hi"}]) as stream:
            t0 = asyncio.get_running_loop().time()
            async for _ in stream.text_stream:
                arrivals.append(asyncio.get_running_loop().time() - t0)
            final = await stream.get_final_message()
        assert len(arrivals) == 4 and arrivals[-1] - arrivals[0] > 0.6
        assert final.content[0].text == "w0 w1 w2 w3 " and final.usage.output_tokens == 4
        reply = await client.messages.create(model="fake-model", max_tokens=5, messages=[
            {"role": "user", "content": "hi"}])
        assert reply.content[0].text == "w0 w1 w2 w3"
        assert rig.metric('supervisor_gateway_requests_total{outcome="ok"}') == 2
        await client.close()


async def _collect(stream) -> tuple[str, object]:
    text, usage = "", None
    async for chunk in stream:
        if chunk.choices:
            choice = chunk.choices[0]
            text += getattr(choice, "text", None) or (
                choice.delta.content if getattr(choice, "delta", None) else "") or ""
        if chunk.usage:
            usage = chunk.usage
    return text, usage


async def _crash_and_restart(rig: Rig, after_s: float) -> None:
    await asyncio.sleep(after_s)
    while rig.engine.poll() is None:                   # the engine dies mid-stream
        await asyncio.sleep(0.05)
    await rig.gw.hold("crash", drain=False)
    await asyncio.sleep(0.5)
    rig.engine = start_engine(rig.policy.engine.port, "--tokens", "8", "--token-delay", "0.05")
    rig.gw.release(0)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_issue_14_a_stream_cut_by_a_crash_is_resumed_as_one_stream(
        tmp_path: Path, path: str) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "8", "--token-delay", "0.05",
                                          "--break-stream-after", "3")) as rig:
        oa = openai.AsyncOpenAI(base_url=rig.url + "/v1", api_key="k", max_retries=0)
        restart = asyncio.create_task(_crash_and_restart(rig, 0.1))
        if path == "/v1/chat/completions":
            raw = await oa.chat.completions.with_raw_response.create(
                model="fake-model", messages=[{"role": "user", "content": "hi"}],
                stream=True, stream_options={"include_usage": True}, max_tokens=7)
        else:
            raw = await oa.completions.with_raw_response.create(
                model="fake-model", prompt="p q", stream=True, max_tokens=7,
                stream_options={"include_usage": True})
        # Issue 31: the mode that began serving it; the SSE comments the gateway writes
        # while the stream is held and when it resumes do not disturb the SDK's parser.
        assert (raw.headers["x-supervisor-mode"], raw.headers["x-supervisor-rung"]) == \
            ("fast", "0")
        text, usage = await _collect(raw.parse())
        await restart
        # Words 0-2 from the first engine, 3-6 from the next: none lost, none twice, and
        # max_tokens (7) holds across both.
        assert text == "w0 w1 w2 w3 w4 w5 w6 "
        assert usage.completion_tokens == 7
        kind = "token" if path == "/v1/completions" else "text"
        assert rig.metric(f'supervisor_gateway_resumptions_total{{continuation="{kind}",'
                          f'outcome="resumed",path="{path}"}}') == 1
        (record,) = rig.gw.resumptions.recent
        assert record["tokens_before"] == 3 and record["continuation"] == kind
        if path == "/v1/completions":
            assert usage.prompt_tokens == 2
        await oa.close()


async def test_issue_14_a_cut_tool_call_or_n2_ends_with_a_clear_error(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "6", "--break-stream-after", "2")) as rig, \
            httpx.AsyncClient() as c:
        async with c.stream("POST", rig.url + "/v1/chat/completions",
                            json=chat(stream=True, n=2)) as r:
            lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
        error = json.loads(lines[-2][6:])
        assert error["error"]["code"] == "engine_stream_broken"
        assert "more than one choice" in error["error"]["message"]
        stop_engine(rig.engine)


async def test_issue_14_resumptions_are_bounded_per_request(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "6", "--token-delay", "0.05",
                                          "--break-stream-after", "2"),
                   gateway={"max_resumes_per_request": 0}) as rig, httpx.AsyncClient() as c:
        async with c.stream("POST", rig.url + "/v1/chat/completions",
                            json=chat(stream=True)) as r:
            lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
        error = json.loads(lines[-2][6:])
        assert "already resumed 0 times" in error["error"]["message"]

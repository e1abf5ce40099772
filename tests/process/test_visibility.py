"""Issue 31 item 2: degradation visible to clients, over real HTTP against the stand-in
engine (a real process): the mode, rung, held seconds and resumption in every proxied
answer's headers, read by the OpenAI and Anthropic SDKs; SSE comments while a stream is
held across an engine restart and when it resumes; the mode on each /v1/models object."""

from __future__ import annotations

import asyncio
from pathlib import Path

import anthropic
import httpx
import openai

from tests.helpers.gateway_rig import Rig, chat, start_engine

TWO_MODES = [{"name": "fast"}, {"name": "safe", "args": {"--max-num-seqs": 1}}]


async def _restart_into(rig: Rig, rung: int) -> None:
    """Wait for the engine to die mid-stream, hold, start the next one, release in
    ``rung`` (what the supervisor does after a crash)."""
    while rig.engine.poll() is None:
        await asyncio.sleep(0.05)
    await rig.gw.hold("restart: engine_exited", drain=False)
    await asyncio.sleep(0.5)
    rig.engine = start_engine(rig.policy.engine.port, "--tokens", "8", "--token-delay", "0.05")
    rig.gw.release(rung)


async def test_issue_31_sdks_read_the_mode_headers_and_models_carry_the_mode(
        tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "4"), modes=TWO_MODES) as rig:
        rig.gw.release(1)                        # stepped down: served by "safe"
        oa = openai.AsyncOpenAI(base_url=rig.url + "/v1", api_key="k", max_retries=0)
        raw = await oa.chat.completions.with_raw_response.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}])
        assert raw.parse().choices[0].message.content == "w0 w1 w2 w3"
        assert {k: raw.headers[f"x-supervisor-{k}"] for k in
                ("mode", "rung", "held-seconds", "resumed")} == {
            "mode": "safe", "rung": "1", "held-seconds": "0.000", "resumed": "false"}
        models = await oa.models.list()
        assert models.data[0].id == "fake-model"
        assert models.data[0].model_extra["supervisor"] == {
            "mode": "safe", "rung": 1, "held": False, "shed": False}
        an = anthropic.AsyncAnthropic(base_url=rig.url, api_key="k", max_retries=0)
        msg = await an.messages.with_raw_response.create(
            model="fake-model", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        assert (await msg.parse()).content[0].text == "w0 w1 w2 w3"
        assert (msg.headers["x-supervisor-mode"], msg.headers["x-supervisor-rung"]) == \
            ("safe", "1")
        rig.gw.release(0)                        # stepped up: the next answer says so
        again = await oa.chat.completions.with_raw_response.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}])
        assert again.headers["x-supervisor-mode"] == "fast"
        await oa.close()
        await an.close()


async def test_issue_31_held_seconds_say_how_long_a_request_waited_for_the_switch(
        tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "2")) as rig, httpx.AsyncClient() as c:
        await rig.gw.hold("step_down: test", drain=False)
        asyncio.get_running_loop().call_later(0.8, rig.gw.release, 0)
        r = await c.post(rig.url + "/v1/chat/completions", json=chat())
        assert r.status_code == 200
        assert 0.5 <= float(r.headers["x-supervisor-held-seconds"]) < 5
        assert r.headers["x-supervisor-resumed"] == "false"


async def test_issue_31_a_request_re_sent_after_a_crash_says_resumed(tmp_path: Path) -> None:
    # The first chat gets vLLM's EngineDeadError 500 and the engine exits: the gateway
    # sends the request again, whole, to the next engine.
    async with Rig(tmp_path, engine_args=("--tokens", "2", "--die-with-500-at", "1"),
                   modes=TWO_MODES) as rig, httpx.AsyncClient(timeout=30) as c:
        restart = asyncio.create_task(_restart_into(rig, 1))
        r = await c.post(rig.url + "/v1/chat/completions", json=chat())
        await restart
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"] == "w0 w1 w2 w3 w4 w5 w6 w7"
        assert r.headers["x-supervisor-resumed"] == "true"
        assert (r.headers["x-supervisor-mode"], r.headers["x-supervisor-rung"]) == \
            ("safe", "1")
        assert float(r.headers["x-supervisor-held-seconds"]) >= 0.5


async def test_issue_31_a_held_stream_gets_sse_comments_and_the_same_text(
        tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "8", "--token-delay", "0.05",
                                          "--break-stream-after", "3"),
                   modes=TWO_MODES) as rig, httpx.AsyncClient(timeout=30) as c:
        restart = asyncio.create_task(_restart_into(rig, 1))
        async with c.stream("POST", rig.url + "/v1/chat/completions",
                            json=chat("hi", stream=True, max_tokens=7)) as r:
            head = dict(r.headers)
            lines = [line async for line in r.aiter_lines() if line]
        await restart
    assert (head["x-supervisor-mode"], head["x-supervisor-rung"]) == ("fast", "0")
    comments = [line for line in lines if line.startswith(":")]
    assert comments[0] == ": supervisor held: engine restarting (mode fast, rung 0)"
    assert comments[-1].startswith(": supervisor resumed: mode safe, rung 1, held ")
    held = lines.index(comments[0])
    assert lines.index(comments[-1]) > held
    assert sum(1 for line in lines[:held] if line.startswith("data: ")) == 3  # w0-w2 first
    assert lines[-1] == "data: [DONE]"


async def test_issue_31_anthropic_sdk_reads_a_resumed_stream_whole(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "8", "--token-delay", "0.05",
                                          "--break-stream-after", "3"),
                   modes=TWO_MODES) as rig:
        an = anthropic.AsyncAnthropic(base_url=rig.url, api_key="k", max_retries=0)
        restart = asyncio.create_task(_restart_into(rig, 1))
        raw = await an.messages.with_raw_response.create(
            model="fake-model", max_tokens=7, stream=True,
            messages=[{"role": "user", "content": "hi"}])
        assert (raw.headers["x-supervisor-mode"], raw.headers["x-supervisor-rung"]) == \
            ("fast", "0")
        text, kinds = "", []
        async for event in await raw.parse():
            kinds.append(event.type)
            if event.type == "content_block_delta":
                text += event.delta.text
        await restart
        await an.close()
        # w0-w2 from the first engine, w3-w6 continued on the next: one message, whole.
        assert text == "w0 w1 w2 w3 w4 w5 w6 "
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        assert kinds.count("message_start") == 1
        (record,) = rig.gw.resumptions.recent
        assert record["outcome"] == "resumed" and record["tokens_before"] == 3

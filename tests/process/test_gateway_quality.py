"""Issue 13 at the gateway, over real HTTP against the fake engine (a real process that
answers as the reports describe): parser errors per agent key, repeated prefixes of a
multi-turn agent, a degenerate stream and the client who asked for repetition; then the
Sample the sensors build from the gateway and the decision it leads to."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from agent_supervisor.sense.gateway_load import gateway_fields
from tests.helpers.gateway_rig import Rig, chat

KEYS = {"auth": "keys", "api_keys": [
    {"name": "coder", "sha256": hashlib.sha256(b"sk-coder").hexdigest()},
    {"name": "writer", "sha256": hashlib.sha256(b"sk-writer").hexdigest()}]}
MODES = [{"name": "fast", "gateway": {"max_concurrency": 4, "max_queue": 4}}]


def as_agent(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_content_null_answers_are_counted_per_agent(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--null-content",), modes=MODES,
                   gateway=KEYS) as rig:
        async with httpx.AsyncClient(timeout=30) as c:
            for _ in range(2):
                r = await c.post(rig.url + "/v1/chat/completions", json=chat(),
                                 headers=as_agent("sk-coder"))
                assert r.status_code == 200 and r.json()["choices"][0]["message"][
                    "content"] is None                  # passed on untouched
            async with c.stream("POST", rig.url + "/v1/chat/completions",
                                json=chat(stream=True), headers=as_agent("sk-writer")) as r:
                async for _ in r.aiter_lines():
                    pass
            status = (await c.get(rig.url + "/gateway/status")).json()
        assert status["parser_errors_by_agent"] == {"coder": 2, "writer": 1}
        assert rig.metric('supervisor_gateway_parser_errors_total{agent="coder",'
                          'kind="content_null"}') == 2
        assert rig.metric('supervisor_gateway_parser_errors_total{agent="writer",'
                          'kind="content_null"}') == 1
        assert gateway_fields(rig.gw)["gateway_parser_errors_total"] == 3


async def test_a_5xx_naming_the_tool_parser_is_a_parser_error(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--fail-every", "2"), modes=MODES) as rig:
        async with httpx.AsyncClient(timeout=30) as c:
            codes = [(await c.post(rig.url + "/v1/chat/completions", json=chat(),
                                   headers=as_agent("sk-any"))).status_code for _ in range(4)]
        assert codes == [200, 500, 200, 500]
        agent = "key:" + hashlib.sha256(b"sk-any").hexdigest()[:8]
        assert rig.metric('supervisor_gateway_parser_errors_total{agent="' + agent
                          + '",kind="parser_error"}') == 2
        assert gateway_fields(rig.gw)["gateway_parser_errors_total"] == 2


async def test_clean_answers_count_nothing(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "300"), modes=MODES) as rig:
        async with httpx.AsyncClient(timeout=30) as c:
            for stream in (False, True):
                r = await c.post(rig.url + "/v1/chat/completions", json=chat(stream=stream))
                assert r.status_code == 200
        fields = gateway_fields(rig.gw)
        assert fields["gateway_parser_errors_total"] == 0
        assert fields["gateway_degenerate_streams_total"] == 0


async def test_a_degenerate_stream_and_the_client_who_asked_for_it(tmp_path: Path) -> None:
    async with Rig(tmp_path, engine_args=("--tokens", "400", "--word", "!"),
                   modes=MODES) as rig:
        async with httpx.AsyncClient(timeout=30) as c:
            asked = chat("Repeat '!' 400 times, nothing else.", stream=True)
            for body in (asked, chat("Summarise main.py", stream=True),
                         chat("Summarise utils.py")):
                r = await c.post(rig.url + "/v1/chat/completions", json=body)
                assert r.status_code == 200 and r.text.count("!") >= 400
        # The asked-for one is not counted; the stream and the whole answer are.
        assert gateway_fields(rig.gw)["gateway_degenerate_streams_total"] == 2
        assert rig.metric('supervisor_gateway_degenerate_streams_total{agent="anonymous"}') == 2


async def test_a_multi_turn_agent_repeats_its_prefix_distinct_prompts_do_not(
        tmp_path: Path) -> None:
    system = {"role": "system", "content": "You are a careful coding agent. " * 40}
    async with Rig(tmp_path, modes=MODES) as rig:
        async with httpx.AsyncClient(timeout=30) as c:
            for i in range(3):
                body = {"model": "fake-model", "messages": [
                    {"role": "user", "content": f"distinct task {i} " + chr(65 + i) * 1200}]}
                assert (await c.post(rig.url + "/v1/chat/completions",
                                     json=body)).status_code == 200
            assert gateway_fields(rig.gw)["gateway_repeated_prefix_tokens_total"] == 0
            turns = [system, {"role": "user", "content": "read main.py"}]
            for turn in range(3):
                r = await c.post(rig.url + "/v1/chat/completions",
                                 json={"model": "fake-model", "messages": turns})
                turns = [*turns, r.json()["choices"][0]["message"],
                         {"role": "user", "content": f"next step {turn}"}]
        repeated = gateway_fields(rig.gw)["gateway_repeated_prefix_tokens_total"]
        # Turns 2 and 3 each resend at least the ~1,300-character system prompt.
        assert repeated >= 2 * 256 * 5 // 4
        assert rig.metric("supervisor_gateway_repeated_prefix_tokens_total") == repeated


async def test_request_shapes_only_where_opted_in_and_never_text(tmp_path: Path) -> None:
    import asyncio

    import pytest

    from agent_supervisor.load.fleet_shapes import fetch_shapes, fleet_profile
    secret = "the customer's password is hunter2"
    async with Rig(tmp_path / "off", modes=MODES) as rig:
        async with httpx.AsyncClient(timeout=30) as c:
            await c.post(rig.url + "/v1/chat/completions", json=chat(secret))
            assert (await c.get(rig.url + "/gateway/shapes")).json() == {
                "enabled": False, "shapes": []}
        with pytest.raises(ValueError, match=r"gateway\.sample_request_shapes"):
            await asyncio.to_thread(fetch_shapes, rig.policy)
    async with Rig(tmp_path / "on", modes=MODES,
                   gateway={"sample_request_shapes": 2}) as rig:
        async with httpx.AsyncClient(timeout=30) as c:
            for n in (1, 2, 3):
                body = {"model": "fake-model", "max_tokens": 100 * n, "messages": [
                    {"role": "user", "content": secret * n * 10}]}
                assert (await c.post(rig.url + "/v1/chat/completions",
                                     json=body)).status_code == 200
            raw = (await c.get(rig.url + "/gateway/shapes")).text
        assert "hunter2" not in raw and "password" not in raw
        shapes = await asyncio.to_thread(fetch_shapes, rig.policy)
        assert [s["max_tokens"] for s in shapes] == [200, 300]       # the last 2 kept
        assert shapes[1]["prompt_tokens"] > shapes[0]["prompt_tokens"] > 100
        profile = fleet_profile(shapes, context_tokens=4096)
        assert profile.name == "fleet" and profile.max_tokens == 250
        assert "hunter2" not in profile.asks[0] and profile.follow_ups == ()
        words = len(profile.asks[0].split())
        median = (shapes[0]["prompt_tokens"] + shapes[1]["prompt_tokens"]) // 2
        assert abs(words - median * 3 // 4) <= 1

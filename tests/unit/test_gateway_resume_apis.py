"""Anthropic messages and Responses streams cut and continued (agent_supervisor/gateway/
resume/apis.py), on streams recorded from the real CPU engine
(tests/fixtures/vllm/0.32.0/streams/): the client's whole stream, read by the Anthropic and
OpenAI SDKs, equals the uninterrupted one."""

from __future__ import annotations

import importlib
import json
from importlib import metadata
from pathlib import Path
from types import ModuleType

import anthropic
import httpx
import openai
import pytest

from agent_supervisor.gateway.resume.apis import plan_stream
from agent_supervisor.gateway.resume.resumption import StreamTap
from agent_supervisor.gateway.resume.sse import events

STREAMS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "0.32.0" / "streams"
PROMPT = "I will read the file in main.py"
MESSAGES = {"model": "tiny-agent", "max_tokens": 40, "temperature": 0, "stream": True,
            "system": "You are terse.", "messages": [{"role": "user", "content": PROMPT}]}
RESPONSES = {"model": "tiny-agent", "max_output_tokens": 40, "temperature": 0,
             "stream": True, "instructions": "You are terse.", "input": PROMPT}
#: vLLM's converter's event when the chat stream it reads breaks (anthropic/serving.py
#: message_stream_converter; constructed from that code, not recorded).
ANTHROPIC_ERROR = (b'event: error\ndata: {"type":"error","error":{"type":"internal_error",'
                   b'"message":"EngineCore encountered an issue."}}\n\n')


def sse(name: str) -> list[bytes]:
    """The recorded stream's events, each with its blank line."""
    return [e + b"\n\n" for e in (STREAMS / name).read_bytes().split(b"\n\n") if e]


def engine(tokenize_seen: list[dict]) -> httpx.AsyncClient:
    """The engine's /tokenize, answering what the real one answered (recorded)."""
    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        tokenize_seen.append(body)
        name = "tokenize_chat.json" if "messages" in body else "tokenize_text.json"
        return httpx.Response(200, content=(STREAMS / name).read_bytes())
    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


def sdk_http(sdk: str) -> ModuleType:
    """The HTTP package the installed ``sdk`` is built on: httpx2 from anthropic 1.0 and
    openai 3.0 (their wheels' Requires-Dist), httpx before (``make test-floors``)."""
    wanted = metadata.requires(sdk) or []
    return importlib.import_module(
        "httpx2" if any(r.startswith("httpx2") for r in wanted) else "httpx")


def as_response(stream: bytes, sdk: str) -> object:
    """An HTTP client of ``sdk``'s HTTP package whose every answer is ``stream`` (what the
    gateway sent)."""
    http = sdk_http(sdk)
    return http.Client(transport=http.MockTransport(lambda r: http.Response(
        200, content=stream, headers={"content-type": "text/event-stream"})))


def text_deltas(stream: list[bytes], kind: str) -> int:
    """Index just past the second text delta (the client has "I will")."""
    seen = 0
    for i, event in enumerate(stream):
        if kind.encode() in event:
            seen += 1
            if seen == 2:
                return i + 1
    raise AssertionError("fewer than two text deltas")


async def test_issue_14_a_cut_messages_stream_continues_on_completions_from_token_ids(
        ) -> None:
    whole = sse("messages.sse")
    at = text_deltas(whole, '"text_delta"')
    plan = plan_stream("/v1/messages", MESSAGES, json.dumps(MESSAGES).encode())
    assert plan is not None and plan.unsupported is None
    tap = StreamTap(record=True, dialect=plan.dialect)
    client_got = b"".join(tap.feed(e) for e in whole[:at])
    assert tap.feed(ANTHROPIC_ERROR) == b"" and tap.engine_error is not None
    assert plan.refusal(tap, 0, 2) is None
    seen: list[dict] = []
    async with engine(seen) as c:
        raw = await plan.build(tap, c, "http://engine")
    assert raw is not None and plan.continuation_path == "/v1/completions"
    cont = json.loads(raw)
    ids = json.loads((STREAMS / "tokenize_chat.json").read_text())["tokens"]
    assert cont["prompt"] == [*ids, 43, 276] and cont["max_tokens"] == 38
    assert cont["temperature"] == 0 and cont["stream"] is True
    assert seen[0]["messages"][0] == {"role": "system", "content": "You are terse."}
    assert seen[0]["add_generation_prompt"] is True
    tap.continue_with(plan)
    for event in sse("completions_continuation.sse"):
        client_got += tap.feed(event)
    assert tap.done and tap.engine_error is None
    # The Anthropic SDK reads the stream the client got as one message.
    an = anthropic.Anthropic(api_key="k", base_url="http://gw", http_client=as_response(
        client_got, "anthropic"))
    with an.messages.stream(model="tiny-agent", max_tokens=40, messages=[]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    want = "".join(e["delta"]["text"] for e in events(b"".join(whole))
                   if e.get("type") == "content_block_delta")
    assert text == want
    assert len(final.content) == 1 and final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (34, 32)
    kinds = [e["type"] for e in events(client_got)]
    assert kinds.count("message_start") == kinds.count("content_block_start") == 1


async def test_issue_14_an_abort_finish_cuts_a_messages_stream_with_its_text_block_open(
        ) -> None:
    whole = sse("messages.sse")
    at = text_deltas(whole, '"text_delta"')
    plan = plan_stream("/v1/messages", MESSAGES, json.dumps(MESSAGES).encode())
    assert plan is not None
    tap = StreamTap(record=True, dialect=plan.dialect)
    for event in whole[:at]:
        tap.feed(event)
    # vLLM's converter on an ``abort`` finish: the block's stop, then a null stop reason.
    assert tap.feed(b'event: content_block_stop\ndata: {"type":"content_block_stop",'
                    b'"index":0}\n\n') == b""
    tap.feed(b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
             b'null,"stop_sequence":null},"usage":{"input_tokens":34,"output_tokens":2}}\n\n')
    assert tap.engine_error is not None and b"content_block_stop" in tap.engine_error
    assert b"content_block_stop" not in bytes(tap.sent)
    assert tap.state().text == "I will"


async def test_issue_14_a_cut_responses_stream_continues_natively_as_one_response() -> None:
    whole = sse("responses.sse")
    at = text_deltas(whole, "response.output_text.delta")
    # With MTP one delta can carry several tokens: the second recorded one is " will list
    # the test". Cut to its first word, as a cut between those tokens would leave it, so
    # the client has "I will", where the recorded continuation (responses_prefill) starts.
    head = [*whole[:at - 1], whole[at - 1].replace(b'"delta":" will list the test"',
                                                   b'"delta":" will"')]
    assert head[-1] != whole[at - 1]
    plan = plan_stream("/v1/responses", RESPONSES, json.dumps(RESPONSES).encode())
    assert plan is not None and plan.unsupported is None
    tap = StreamTap(record=True, dialect=plan.dialect)
    client_got = b"".join(tap.feed(e) for e in head)
    assert not tap.done                          # the connection then breaks: a cut
    seen: list[dict] = []
    async with engine(seen) as c:
        raw = await plan.build(tap, c, "http://engine")
    assert raw is not None and plan.continuation_path == "/v1/responses"
    cont = json.loads(raw)
    assert seen == [{"model": "tiny-agent", "prompt": "I will", "add_special_tokens": False}]
    first = next(e for e in events(b"".join(whole))
                 if e["type"] == "response.output_item.added")["item"]["id"]
    assert cont["input"] == [
        {"type": "message", "role": "user", "content": PROMPT},
        {"type": "message", "role": "assistant", "status": "incomplete", "id": first,
         "content": [{"type": "output_text", "text": "I will", "annotations": []}]}]
    assert cont["max_output_tokens"] == 38 and cont["instructions"] == "You are terse."
    tap.continue_with(plan)
    for event in sse("responses_prefill.sse"):   # the real engine's continuation
        client_got += tap.feed(event)
    assert tap.done
    got = events(client_got)
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    assert {e["item_id"] for e in got if "item_id" in e} == {first}
    want = events(b"".join(whole))
    # The same events, but for how many deltas carry the text (MTP batches tokens).
    def kinds(evs: list[dict]) -> list[str]:
        return [e["type"] for e in evs if e["type"] != "response.output_text.delta"]
    assert kinds(got) == kinds(want)
    done = {e["type"]: e for e in got}
    ref = {e["type"]: e for e in want}
    assert done["response.output_text.done"]["text"] == ref["response.output_text.done"]["text"]
    final, ref_final = done["response.completed"]["response"], \
        ref["response.completed"]["response"]
    assert final["output"] == [{**ref_final["output"][0], "id": first}]
    assert final["id"] == got[0]["response"]["id"]
    assert final["usage"]["output_tokens"] == ref_final["usage"]["output_tokens"]
    # The OpenAI SDK reads it as one response with the whole text.
    oa = openai.OpenAI(api_key="k", base_url="http://gw/v1", http_client=as_response(
        client_got, "openai"))
    text = "".join(e.delta for e in oa.responses.create(model="tiny-agent", input="x",
                                                          stream=True)
                   if e.type == "response.output_text.delta")
    assert text == ref["response.output_text.done"]["text"]


def test_issue_14_the_real_cut_responses_stream_is_read_to_its_last_event() -> None:
    """vLLM's connection breaks with no event when its EngineCore dies (recorded): the tap
    passes on every whole event and is not done, so the stream is resumed."""
    plan = plan_stream("/v1/responses", {**RESPONSES, "max_output_tokens": 1900}, b"{}")
    assert plan is not None
    tap = StreamTap(record=True, dialect=plan.dialect)
    for event in sse("responses_cut.sse"):
        tap.feed(event)
    state = tap.state()
    assert not tap.done and tap.engine_error is None
    assert state.extra["seq"] == 111 and state.text.startswith("I will list the test")
    assert plan.refusal(tap, 0, 2) is None


@pytest.mark.parametrize(("path", "extra", "why"), [
    ("/v1/messages", {"tools": [{"name": "read", "input_schema": {}}]}, "tools"),
    ("/v1/messages", {"thinking": {"type": "enabled", "budget_tokens": 64}}, "thinking"),
    ("/v1/messages", {"messages": [{"role": "user", "content": [
        {"type": "image", "source": {}}]}]}, "not all text"),
    ("/v1/responses", {"previous_response_id": "resp_1"}, "no longer holds"),
    ("/v1/responses", {"tools": [{"type": "function", "name": "f"}]}, "tools"),
    ("/v1/responses", {"reasoning": {"effort": "low"}}, "reasoning"),
])
def test_issue_14_what_is_not_resumed_on_messages_and_responses_says_why(
        path: str, extra: dict, why: str) -> None:
    body = {**(MESSAGES if path == "/v1/messages" else RESPONSES), **extra}
    plan = plan_stream(path, body, json.dumps(body).encode())
    assert plan is not None and plan.unsupported is not None and why in plan.unsupported
    assert plan_stream(path, {**body, "stream": False}, b"{}") is None

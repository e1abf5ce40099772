"""The gateway's pure parts: the allow-list and path forms, body checks, the prompt
estimate, and the stream tap and continuation requests of a resumption."""

from __future__ import annotations

import json

import pytest

from agent_supervisor.gateway.body import BadBody, parse_body
from agent_supervisor.gateway.paths import Api, Route, Routes, not_normal
from agent_supervisor.gateway.resume.resumption import StreamTap, plan_resumption


def sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chat_chunk(text: str, **extra) -> bytes:
    return sse({"id": "chatcmpl-1", "created": 7, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
                **extra})


def test_issue_17_routes_admit_generation_and_never_admin_paths() -> None:
    routes = Routes(["/v1/chat/completions/render", "/collective_rpc", "/x/../sleep"])
    assert routes.route(b"/v1/messages") == (Route.ADMIT, Api.ANTHROPIC)
    assert routes.route(b"/pooling") == (Route.ADMIT, Api.OPENAI)
    assert routes.route(b"/v1/models") == (Route.PASS, Api.OPENAI)
    assert routes.route(b"/v1/chat/completions/render") == (Route.PASS, Api.OPENAI)
    assert routes.route(b"/collective_rpc") is None and routes.route(b"/sleep") is None
    assert routes.ignored == ["/collective_rpc", "/x/../sleep"]


@pytest.mark.parametrize("raw,why", [
    (b"/v1/./chat/completions", "dot"), (b"/v1/../v1/chat/completions", "dot"),
    (b"/v1/chat/completions/.", "dot"), (b"//v1/chat/completions", "//"),
    (b"/v1%2Fchat/completions", "percent"), (b"/v1\\chat", "backslash"),
    (b"/v1/chat/completions", None)])
def test_issue_17_path_forms(raw: bytes, why: str | None) -> None:
    got = not_normal(raw)
    assert (got is None) if why is None else (why in got)


@pytest.mark.parametrize("raw,param", [
    (b'{"messages": 5}', "messages"), (b'{"messages": ["x"]}', "messages"),
    (b'{"prompt": 3}', "prompt"), (b'{"stream": "yes"}', "stream"),
    (b"[" * 100_000 + b"]" * 100_000, None), (b"\xff\xfe{}", None), (b"{", None),
    (b"", None), (b"42", None)])
def test_issue_17_bad_bodies_raise_bad_body_only(raw: bytes, param: str | None) -> None:
    with pytest.raises(BadBody) as err:
        parse_body(raw)
    assert err.value.param == param


def test_tap_passes_whole_events_and_holds_back_an_engine_error() -> None:
    tap = StreamTap(record=True)
    first = chat_chunk("Hel")
    assert tap.feed(first[:10]) == b""                 # half an event waits
    assert tap.feed(first[10:] + chat_chunk("lo")[:5]) == first
    err = b'data: {"error": {"message": "EngineDeadError", "code": 500}}\n\ndata: [DONE]\n\n'
    out = tap.feed(chat_chunk("lo")[5:] + err)
    assert out == chat_chunk("lo") and tap.engine_error == err and not tap.done
    state = tap.state()
    assert (state.text, state.tokens, state.id) == ("Hello", 2, "chatcmpl-1")


def test_tap_treats_an_abort_finish_as_a_cut() -> None:
    tap = StreamTap(record=True)
    abort = sse({"id": "c", "choices": [{"index": 0, "delta": {"content": ""},
                                         "finish_reason": "abort"}]})
    assert tap.feed(chat_chunk("a") + abort) == chat_chunk("a")
    assert tap.engine_error is not None


def test_chat_continuation_is_a_final_assistant_message() -> None:
    body = {"model": "m", "stream": True, "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}]}
    plan = plan_resumption("/v1/chat/completions", body, json.dumps(body).encode())
    tap = StreamTap(record=True)
    tap.feed(sse({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {
        "role": "assistant", "content": ""}}]}) + chat_chunk("Hel") + chat_chunk("lo"))
    assert plan.refusal(tap, 0, 2) is None
    cont = json.loads(plan.continuation(tap, tokens_sent=1))
    assert cont["messages"][-1] == {"role": "assistant", "content": "Hello"}
    assert cont["continue_final_message"] is True and cont["add_generation_prompt"] is False
    assert cont["max_tokens"] == 9
    tap.continue_with(plan)
    # The continuation's role chunk is dropped, its id becomes the first part's, usage sums.
    out = tap.feed(sse({"id": "chatcmpl-2", "created": 9, "choices": [{"index": 0, "delta": {
        "role": "assistant", "content": ""}}]}) + sse({"id": "chatcmpl-2", "created": 9,
        "choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": "stop"}]})
        + sse({"id": "chatcmpl-2", "choices": [], "usage": {
            "prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}})
        + b"data: [DONE]\n\n")
    events = [json.loads(e[6:]) for e in out.split(b"\n\n") if e.startswith(b"data: {")]
    assert [e["id"] for e in events] == ["chatcmpl-1", "chatcmpl-1"]
    assert events[0]["created"] == 7 and events[0]["choices"][0]["delta"] == {"content": "!"}
    assert events[1]["usage"] == {"prompt_tokens": 11, "completion_tokens": 3,
                                  "total_tokens": 14}
    assert tap.done


def test_completion_continuation_is_token_level() -> None:
    body = {"model": "m", "stream": True, "max_tokens": 5, "prompt": "a b"}
    raw = json.dumps(body).encode()
    plan = plan_resumption("/v1/completions", body, raw)
    assert plan.token_level and json.loads(plan.upstream_raw)["return_token_ids"] is True
    tap = StreamTap(record=True)
    tap.feed(sse({"id": "cmpl-1", "choices": [{"index": 0, "text": "x",
                                               "prompt_token_ids": [5, 6], "token_ids": [9]}]})
             + sse({"id": "cmpl-1", "choices": [{"index": 0, "text": "y",
                                                 "token_ids": [10, 11]}]}))
    cont = json.loads(plan.continuation(tap, tokens_sent=99))   # ids win over a count
    assert cont["prompt"] == [5, 6, 9, 10, 11] and cont["max_tokens"] == 2


@pytest.mark.parametrize("extra,why", [({"n": 2}, "more than one choice"),
                                       ({"logprobs": True}, "logprobs"),
                                       ({"echo": True}, "echo")])
def test_what_is_not_resumed_says_why(extra: dict, why: str) -> None:
    body = {"model": "m", "stream": True, "messages": [], **extra}
    plan = plan_resumption("/v1/chat/completions", body, json.dumps(body).encode())
    assert why in plan.refusal(StreamTap(record=False), 0, 2)


def test_a_cut_tool_call_is_not_resumed() -> None:
    body = {"model": "m", "stream": True, "messages": []}
    plan = plan_resumption("/v1/chat/completions", body, json.dumps(body).encode())
    tap = StreamTap(record=True)
    tap.feed(sse({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": "{\"pa"}}]}}]}))
    assert "tool call" in plan.refusal(tap, 0, 2)
    assert plan_resumption("/v1/messages", body, b"{}") is None


def test_chat_with_token_ids_continues_token_level_on_completions() -> None:
    body = {"model": "m", "stream": True, "max_completion_tokens": 10, "temperature": 0,
            "messages": [{"role": "user", "content": "hi"}], "stream_options": {
                "include_usage": True}}
    plan = plan_resumption("/v1/chat/completions", body, json.dumps(body).encode())
    assert plan.token_level and json.loads(plan.upstream_raw)["return_token_ids"] is True
    tap = StreamTap(record=True)
    tap.feed(sse({"id": "chatcmpl-1", "created": 7, "prompt_token_ids": [1, 2, 3],
                  "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
             + chat_chunk("Hel").replace(b'"finish_reason": null', b'"finish_reason": null, '
                                            b'"token_ids": [40]')
             + chat_chunk("lo").replace(b'"finish_reason": null', b'"finish_reason": null, '
                                        b'"token_ids": [41]'))
    cont = json.loads(plan.continuation(tap))
    assert plan.used_tokens and plan.continuation_path == "/v1/completions"
    assert cont["prompt"] == [1, 2, 3, 40, 41] and cont["max_tokens"] == 8
    assert cont["temperature"] == 0 and "messages" not in cont
    tap.continue_with(plan)
    out = tap.feed(sse({"id": "cmpl-9", "object": "text_completion", "choices": [
        {"index": 0, "text": "!", "token_ids": [42], "prompt_token_ids": [1, 2, 3, 40, 41],
         "finish_reason": "length"}]}))
    (event,) = [json.loads(e[6:]) for e in out.split(b"\n\n") if e]
    assert event["id"] == "chatcmpl-1" and event["object"] == "chat.completion.chunk"
    assert event["choices"] == [{"index": 0, "delta": {"content": "!"}, "logprobs": None,
                                 "finish_reason": "length", "token_ids": [42]}]

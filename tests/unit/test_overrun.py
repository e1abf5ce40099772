"""Issue 29: an answer past its request's ``max_tokens`` (llama.cpp #25026: after a context
shift llama-server ignored ``max_tokens``/``n_predict``), counted at the gateway from
what it streams: the bound each API names, the count per event, ``usage`` when higher,
and the margin that keeps an answer within its bound untouched."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from agent_supervisor.gateway.overrun import TokenCount, answer_limit, requested_max_tokens
from agent_supervisor.gateway.quality import Quality


def chat_event(text: str) -> bytes:
    ev = {"object": "chat.completion.chunk",
          "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return f"data: {json.dumps(ev)}\n\n".encode()


@pytest.mark.parametrize(("body", "asked"), [
    ({"max_completion_tokens": 50, "max_tokens": 900}, 50),   # chat: the newer name wins
    ({"max_tokens": 64}, 64),                                 # completions, Anthropic
    ({"max_output_tokens": 128}, 128),                        # Responses
    ({"n_predict": 512}, 512),                                # llama.cpp /completion
    ({"n_predict": -1}, None),                                # llama.cpp: unbounded
    ({"max_tokens": "64"}, None), ({"max_tokens": True}, None), ({}, None),
])
def test_the_bound_each_api_names(body: dict, asked: int | None) -> None:
    assert requested_max_tokens(body) == asked


def test_the_limit_adds_both_margins() -> None:
    assert answer_limit({"max_tokens": 512}, margin_tokens=32, margin_ratio=0.1) == 512 + 32 + 52
    assert answer_limit({"max_tokens": 0}, margin_tokens=0, margin_ratio=0.0) == 0
    assert answer_limit({}, margin_tokens=32, margin_ratio=0.1) is None


def test_events_are_counted_and_usage_replaces_a_lower_count() -> None:
    count = TokenCount(limit=10)
    role = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    assert not count.event(role) and count.tokens == 0          # no output in it
    for _ in range(4):
        count.event({"choices": [{"index": 0, "delta": {"content": "ab"}}]})
    count.event({"choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]})
    count.event({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}})
    count.event({"type": "response.output_text.delta", "delta": "y"})
    assert count.tokens == 7 and not count.past
    # speculation: one event carried several tokens; the engine's usage says how many
    assert count.event({"choices": [], "usage": {"completion_tokens": 11}})
    assert count.past and count.tokens == 11
    assert not count.event({"choices": [{"index": 0, "text": "z"}]})   # once only


def test_no_bound_never_past() -> None:
    count = TokenCount(limit=None)
    for _ in range(10_000):
        count.event({"choices": [{"index": 0, "text": "t"}]})
    assert not count.past and count.tokens == 10_000


def test_a_stream_past_its_bound_is_counted_once_and_one_within_is_not() -> None:
    q = Quality(CollectorRegistry(), repeat_units=256)
    limit = answer_limit({"max_tokens": 100}, margin_tokens=32, margin_ratio=0.1)
    within = q.watch("a", "prompt", limit)
    for i in range(100):                        # a long answer, within its max_tokens
        within.feed_sse(chat_event(f"w{i} "))
    within.end_stream()
    assert not within.past and q.overrun_answers_total == 0
    past = q.watch("a", "prompt", limit)
    for i in range(300):                        # ran on after a context shift
        past.feed_sse(chat_event(f"w{i} "))
    past.end_stream()
    assert past.past and past.count.tokens == 300 and q.overrun_answers_total == 1


def test_a_whole_answer_past_its_bound_is_recorded_from_usage() -> None:
    q = Quality(CollectorRegistry(), repeat_units=256)
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "w " * 200}}],
            "usage": {"completion_tokens": 200}}
    q.watch("a", "p", 20 + 32 + 2).whole(200, json.dumps(body).encode(), switched=False)
    assert q.overrun_answers_total == 1
    q.watch("a", "p", 200 + 32 + 20).whole(200, json.dumps(body).encode(), switched=False)
    assert q.overrun_answers_total == 1

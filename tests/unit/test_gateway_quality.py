"""The gateway's answer judgement (agent_supervisor/gateway/quality.py), on recorded shapes:
degenerate runs, what a prompt asks for, repeated prefixes, parser-error answers."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry

from agent_supervisor.gateway.quality import (
    BLOCK_CHARS,
    PrefixMemory,
    Quality,
    RepeatRun,
    agent_label,
    answer_problem,
    asked_for,
)


def feed(run: RepeatRun, pieces) -> tuple[str, int] | None:
    for p in pieces:
        hit = run.feed(p)
        if hit is not None:
            return hit
    return None


def test_token_zero_repeated_is_found_after_the_threshold_and_not_before() -> None:
    # vllm #55766: "!" (token 0) sampled until max_tokens after a normal start.
    run = RepeatRun(256)
    assert feed(run, ["Sure, ", "here ", "it ", "is"] + ["!"] * 250) is None
    hit = feed(run, ["!"] * 10)
    assert hit == ("!", 256)
    assert run.feed("!") is None                     # each answer is counted once


def test_speculative_chunks_carry_several_units() -> None:
    run = RepeatRun(256)
    assert feed(run, ["A"] + ["!!!!"] * 60) is None          # 240 units
    hit = feed(run, ["!!!!"] * 10)
    assert hit is not None and hit[0] == "!" and hit[1] >= 256


def test_a_repeated_word_is_one_unit() -> None:
    # anthropics/claude-code#82803: one token ("court") ~32,000 times.
    hit = feed(RepeatRun(256), ["The "] + [" court"] * 300)
    assert hit is not None and hit[0].strip() == "court" and len(hit[0]) == 6


def test_ordinary_text_and_code_never_degenerate() -> None:
    text = ("def f(x):\n    return [i * x for i in range(10)]\n\n" * 40
            + "| a | b |\n|---|---|\n" * 30 + "The answer is 42. " * 20)
    run = RepeatRun(256)
    assert feed(run, [text[i:i + 7] for i in range(0, len(text), 7)]) is None


def test_the_client_asking_for_repetition_is_told_apart() -> None:
    assert asked_for("!", "Print '!!!!' forever")
    assert asked_for(" ha", "Repeat the word ha 400 times")
    # Read at an event boundary mid-word, " main" repeated is "ain m" repeated (the real
    # engine's control failed so, 2026-12-04): any rotation of the unit counts.
    assert asked_for("ain m", "Repeat the word main 300 times, nothing else.")
    assert not asked_for("ain m", "I will read the file in main.py")
    assert asked_for("ab", "abababab")
    assert not asked_for("!", "Hello! Summarise this file.")     # '!' once, no request
    assert not asked_for(" court", "Who decides in a court of law?")
    assert not asked_for("\n", "write a poem")


def test_a_later_turn_repeats_the_earlier_turns_prefix() -> None:
    mem = PrefixMemory()
    system = {"role": "system", "content": "You are a coding agent. " * 60}
    first = [system, {"role": "user", "content": "read main.py"}]
    assert mem.observe(json.dumps(first)) == 0
    q = Quality(CollectorRegistry(), repeat_units=256)
    q.request({"messages": first})
    second = {"messages": [*first, {"role": "assistant", "content": "done " * 50},
                           {"role": "user", "content": "now fix the bug"}]}
    q.request(second)
    assert q.repeated_prefix_tokens_total >= (len(json.dumps(system)) // BLOCK_CHARS) * 64


def test_distinct_prompts_repeat_nothing() -> None:
    q = Quality(CollectorRegistry(), repeat_units=256)
    for i in range(20):
        q.request({"messages": [{"role": "user", "content": f"question {i}: " + str(i) * 900}]})
    assert q.repeated_prefix_tokens_total == 0


def test_answers_with_parser_errors() -> None:
    null = {"choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": None}}]}
    tool = {"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}}]}
    ok = {"choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": "hi"}}]}
    assert answer_problem(200, json.dumps(null).encode(), switched=False) == "content_null"
    assert answer_problem(200, json.dumps(tool).encode(), switched=False) is None
    assert answer_problem(200, json.dumps(ok).encode(), switched=False) is None
    parse = b'{"error": {"message": "Failed to parse tool call arguments as JSON"}}'
    assert answer_problem(500, parse, switched=False) == "parser_error"
    assert answer_problem(502, b"bad gateway", switched=False) == "http_5xx"
    assert answer_problem(503, b"", switched=True) is None       # a switch, not a parser
    assert answer_problem(400, parse, switched=False) is None     # the client's fault


def test_agents_are_named_never_by_their_key() -> None:
    import hashlib
    digest = hashlib.sha256(b"sk-secret").hexdigest()
    assert agent_label("sk-secret", {digest: "coder"}) == "coder"
    assert agent_label("sk-secret", {}) == f"key:{digest[:8]}"
    assert "secret" not in agent_label("sk-secret", {})
    assert agent_label("", {}) == "anonymous"


def test_prefix_caching_is_read_from_the_argv_vllm_gets() -> None:
    import yaml

    from agent_supervisor.decide.rungs import prefix_caching
    from agent_supervisor.policy import load_policy
    from tests.helpers.field_cases import BASE_POLICY
    data = yaml.safe_load(BASE_POLICY.read_text())
    data["modes"][1]["args"]["--no-enable-prefix-caching"] = True
    policy = load_policy(yaml.safe_dump(data))
    assert "--enable-prefix-caching" in policy.engine.args          # on for every rung ...
    assert prefix_caching(policy, policy.modes[0])
    assert not prefix_caching(policy, policy.modes[1])               # ... but the last flag wins
    data["engine"]["args"] = [a for a in data["engine"]["args"] if a != "--enable-prefix-caching"]
    policy = load_policy(yaml.safe_dump(data))
    assert prefix_caching(policy, policy.modes[0])                   # vLLM V1's default


def _chat_event(piece: str) -> bytes:
    """One chat chunk as vLLM 0.32.0 sends it (chat_completion/protocol.py)."""
    return b"data: " + json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                                   "choices": [{"index": 0, "delta": {"content": piece},
                                                "finish_reason": None}]}).encode() + b"\n\n"


def test_a_streamed_answer_is_read_in_batches_and_one_bad_event_hides_nothing() -> None:
    """The watch parses a batch of events at once (WATCH_BATCH_BYTES): a degenerate
    run split over batches and SSE chunks is still found, a malformed event between
    good ones loses only itself, and end_stream reads what is left."""
    q = Quality(CollectorRegistry(), repeat_units=256)
    watch = q.watch("coder", "Summarise main.py")
    stream = _chat_event("Sure, here it is") + b"data: {not json\n\n" + b"".join(
        _chat_event("!") for _ in range(300))
    for at in range(0, len(stream), 97):           # chunks that split events
        watch.feed_sse(stream[at:at + 97])
    assert q.degenerate_streams_total == 1         # found within the batches
    short = Quality(CollectorRegistry(), repeat_units=8)
    tail = short.watch("coder", "Summarise main.py")
    for event in [_chat_event("x")] + [_chat_event("!")] * 10:     # under one batch
        tail.feed_sse(event)
    assert short.degenerate_streams_total == 0     # not read yet: a batch is not full
    tail.end_stream()                              # the last, partial batch is read
    assert short.degenerate_streams_total == 1

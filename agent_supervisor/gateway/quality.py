"""What the gateway can tell about the engine's answers: parser errors, repeated prefixes
and degenerate streams, counted for the sensors (``GatewayLoad``) and /metrics.

Three things the engine's own metrics cannot say:

1. **Parser errors per agent key** (``gateway_parser_errors_total``): a chat answer with
   ``content: null`` and ``finish_reason: "stop"`` and no tool call (GPT-OSS Harmony's
   parser ending in a non-terminal state: vllm #45736; the neighbours in vllm #46464), an
   error body or error event naming a parser ("Failed to parse tool call arguments as
   JSON", vxcontrol/pentagi#313), and a 5xx on one request while the engine was not being
   switched (a truncated tool call surfacing as HTTP 500: exo-explore/exo#2184). The
   ``agent_errors`` guard records them, never a restart. The agent is the key's name under
   ``auth: keys``, else ``key:`` and 8 hex digits of the key's SHA-256, else ``anonymous``:
   never the key itself.
2. **Repeated prefixes** (``gateway_repeated_prefix_tokens_total``): the prompt is rendered
   (system, tools, then one JSON line per message: a later turn of a conversation starts
   with the same lines) and hashed in blocks of ``BLOCK_CHARS`` characters, each block's
   hash chained to the one before, the way vLLM's prefix cache hashes blocks of tokens
   (vllm/v1/core/kv_cache_utils.py ``hash_block_tokens``). The leading blocks an earlier
   request already had are the prefix the cache should hit; their tokens (the gateway's
   estimate, ``BYTES_PER_TOKEN``) are counted. Distinct prompts count 0.
3. **Degenerate streams** (``gateway_degenerate_streams_total``): the answer's text ends in
   one short unit (at most ``MAX_UNIT_CHARS`` characters: a token) repeated at least
   ``gateway.degenerate_repeat_units`` times: token 0 sampled after NaN logits until
   ``max_tokens`` (32,768 tokens over 11 minutes, vllm #55766), one token repeated ~32,000
   times (anthropics/claude-code#82803). Not counted when the client asked for it: the
   unit repeated in the prompt itself (at least ``PROMPT_UNIT_REPEATS`` times in a row),
   or the prompt asking for repetition and holding the unit. The ``corrupted_output``
   guard takes a rise as corrupted output. Each stream is counted once.
4. **Answers past their ``max_tokens``** (``gateway_overrun_answers_total``): the tokens
   of each answer counted against what its request asked for
   (agent_supervisor/gateway/overrun.py: approximate, only ever low, so a margin); a
   stream clearly past it is ended by the gateway (``AnswerWatch.past``).

Privacy: prompts and answers are read in memory while the request lasts; only numbers
leave this module (the log names the unit's length and count, never its text). With
``gateway.sample_request_shapes`` (opt-in, default 0) the last N requests' shapes are kept
for ``supervisor calibrate --profiles fleet``: lengths and counts only, never text.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import OrderedDict, deque
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from agent_supervisor.gateway.overrun import TokenCount
from agent_supervisor.gateway.prompt import BYTES_PER_TOKEN, estimate_tokens

__all__ = ["BLOCK_CHARS", "MAX_UNIT_CHARS", "PROMPT_UNIT_REPEATS", "WATCH_BATCH_BYTES",
           "AnswerWatch", "Quality", "RepeatRun", "agent_label", "answer_problem",
           "json_object", "prompt_text", "request_shape"]

logger = logging.getLogger(__name__)

#: Characters per hashed prompt block (about 64 tokens at 4 bytes a token; vLLM's default
#: block is 16 tokens on GPUs, 128 on the CPU backend: the count is an estimate anyway).
BLOCK_CHARS = 256
#: Prompt block hashes remembered (least recently seen forgotten first): about 4 MB.
MAX_BLOCKS = 50_000
#: The longest repeated unit judged (characters): one token, or a few.
MAX_UNIT_CHARS = 16
#: Stream bytes the answer watch reads at once (about 25 of vLLM's chat chunks): a
#: degenerate run of hundreds of tokens is still seen within one batch of its start.
WATCH_BATCH_BYTES = 8192
#: A unit that the prompt itself repeats this many times in a row was asked for.
PROMPT_UNIT_REPEATS = 3
_ASKS_REPETITION = re.compile(r"repeat|repetit|over and over|again and again|verbatim|"
                              r"\becho\b|\bcop(?:y|ies)\b|\b\d+\s*times\b", re.I)
_PARSER = re.compile(r"pars(?:e|er|ing)", re.I)
#: A JSON ``"content": null`` member, however spaced (RFC 8259 allows whitespace around
#: the colon): a whole answer without one cannot be ``content_null``.
_CONTENT_NULL = re.compile(rb'"content"\s*:\s*null')


def agent_label(token: str, names: dict[str, str]) -> str:
    """The agent a request's key belongs to: its policy name (``names``: SHA-256 hex ->
    name), else ``key:`` + 8 hex digits of the digest, else ``anonymous``."""
    if not token:
        return "anonymous"
    digest = hashlib.sha256(token.encode()).hexdigest()
    return names.get(digest) or f"key:{digest[:8]}"


def prompt_text(body: dict[str, Any]) -> str:
    """The prompt as one string, earlier turns first: ``system``, ``instructions``,
    ``tools``, then a JSON line per message (``messages``) or the ``prompt``/``input``."""
    parts: list[str] = []
    for name in ("system", "instructions", "tools"):
        if body.get(name) is not None:
            parts.append(json.dumps(body[name], sort_keys=True, ensure_ascii=False))
    for name in ("messages", "input", "prompt"):
        value = body.get(name)
        if isinstance(value, list) and name != "prompt":
            parts.extend(json.dumps(m, sort_keys=True, ensure_ascii=False) for m in value)
        elif isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts.append(json.dumps(value))
    return "\n".join(parts)


def request_shape(body: dict[str, Any]) -> dict[str, Any]:
    """A request's shape, never its text: estimated prompt tokens, the answer length it
    asks for, turns, whether it carries tools and streams (for ``calibrate``'s fleet
    profile)."""
    messages = body.get("messages")
    asked = body.get("max_tokens", body.get("max_completion_tokens"))
    return {"prompt_tokens": estimate_tokens(body),
            "max_tokens": asked if isinstance(asked, int) else None,
            "turns": len(messages) if isinstance(messages, list) else 1,
            "tools": bool(body.get("tools")), "stream": bool(body.get("stream"))}


class PrefixMemory:
    """Chained block hashes of earlier prompts (see the module docstring, point 2)."""

    def __init__(self, max_blocks: int = MAX_BLOCKS) -> None:
        self.max_blocks = max_blocks
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def observe(self, text: str) -> int:
        """Characters at the start of ``text`` (whole blocks) an earlier prompt had; then
        remembers ``text``'s blocks."""
        data = text.encode("utf-8", "replace")
        prev, repeated, matching = b"", 0, True
        for start in range(0, len(data) - BLOCK_CHARS + 1, BLOCK_CHARS):
            prev = hashlib.blake2b(prev + data[start:start + BLOCK_CHARS],
                                   digest_size=12).digest()
            if matching and prev in self._seen:
                repeated += BLOCK_CHARS
                self._seen.move_to_end(prev)
                continue
            matching = False
            self._seen[prev] = None
        while len(self._seen) > self.max_blocks:
            self._seen.popitem(last=False)
        return repeated


class RepeatRun:
    """Whether a text, fed piece by piece, ends in one short unit repeated ``units`` times.

    For each period ``d`` (1..``MAX_UNIT_CHARS``) that the text still follows it keeps how
    many characters it has followed it. Only periods whose character ``d`` back equals the
    last one are checked (``str.find``), each with one string comparison: a few
    microseconds a chunk.
    """

    def __init__(self, units: int) -> None:
        self.units = units
        self.tail = ""
        self.run: dict[int, int] = {}
        self.found: tuple[str, int] | None = None
        """(unit, repeats) once the text degenerated."""

    def feed(self, piece: str) -> tuple[str, int] | None:
        """Add ``piece``; returns (unit, repeats) the first time the run is long enough."""
        if not piece or self.found is not None:
            return None
        text = self.tail + piece
        self.tail = text[-MAX_UNIT_CHARS - 1:]
        before, last = text[-MAX_UNIT_CHARS - 1:-1], text[-1]
        runs: dict[int, int] = {}
        at = before.find(last)
        while at >= 0:
            d = len(before) - at
            w = text[-(len(piece) + d):]
            if len(w) > d and w[d:] == w[:-d]:
                runs[d] = self.run.get(d, 0) + len(piece)
                if runs[d] >= self.units * d:
                    self.found = (text[-d:], runs[d] // d)
                    return self.found
            at = before.find(last, at + 1)
        self.run = runs
        return None


def asked_for(unit: str, prompt: str) -> bool:
    """Whether the prompt asked for ``unit`` repeated (see the module docstring).

    A repeated run has its unit only up to rotation: "main main main" read at an event
    boundary that falls mid-word is "ain m" repeated, so every rotation of ``unit`` is
    tried (the unit is at most ``MAX_UNIT_CHARS`` long). Seen 2026-12-04 on the real
    engine: a prompt asking for "main" 300 times was counted degenerate with a 5-character
    unit that was not " main"."""
    asks = _ASKS_REPETITION.search(prompt) is not None
    for i in range(max(len(unit), 1)):
        turn = unit[i:] + unit[:i]
        core = turn.strip()
        if not core:
            if turn * PROMPT_UNIT_REPEATS in prompt:
                return True
            continue
        if turn * PROMPT_UNIT_REPEATS in prompt or core * PROMPT_UNIT_REPEATS in prompt:
            return True
        if asks and core in prompt:
            return True
    return False


def json_object(content: bytes) -> dict[str, Any] | None:
    """``content`` parsed, if it is a JSON object (else None; never raises)."""
    if not content.startswith(b"{"):
        return None
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def answer_problem(status: int, content: bytes, *, switched: bool,
                   data: dict[str, Any] | None = None) -> str | None:
    """The parser-error kind of a whole (non-streamed) answer, or None: ``http_5xx``
    (not during a switch), ``parser_error`` (an error body naming a parser),
    ``content_null`` (``content: null``, ``finish_reason: "stop"``, no tool call).
    ``data``: ``content`` already parsed (``json_object``), so it is parsed once."""
    if status >= 500:
        if switched:
            return None
        return "parser_error" if _PARSER.search(content[:4096].decode("utf-8", "replace")) \
            else "http_5xx"
    if status >= 400:
        return None
    if data is None:
        data = json_object(content)
    if data is None:
        return None
    return choices_problem(data.get("choices"), message_key="message")


def choices_problem(choices: Any, *, message_key: str) -> str | None:
    """``content_null`` when a choice stopped with no content and no tool call."""
    for ch in choices if isinstance(choices, list) else ():
        msg = ch.get(message_key) if isinstance(ch, dict) else None
        if isinstance(msg, dict) and ch.get("finish_reason") == "stop" \
                and msg.get("content") is None and not msg.get("tool_calls"):
            return "content_null"
    return None


def _choices(data: dict[str, Any]) -> list[Any]:
    """``data``'s ``choices`` when they are a list (an engine may send anything)."""
    choices = data.get("choices")
    return choices if isinstance(choices, list) else []


class Quality:
    """The gateway's answer counters (see the module docstring); ``registry`` gets
    ``supervisor_gateway_parser_errors_total{agent,kind}``,
    ``supervisor_gateway_degenerate_streams_total{agent}`` and
    ``supervisor_gateway_repeated_prefix_tokens_total``."""

    def __init__(self, registry: CollectorRegistry, *, repeat_units: int,
                 keep_shapes: int = 0) -> None:
        self.repeat_units = repeat_units
        self.shapes: deque[dict[str, Any]] = deque(maxlen=keep_shapes or None)
        """The last ``gateway.sample_request_shapes`` requests' shapes (numbers only:
        prompt tokens, max_tokens, turns, tools, stream); empty when not opted in."""
        self.prefixes = PrefixMemory()
        self.parser_errors_total = 0
        self.degenerate_streams_total = 0
        self.overrun_answers_total = 0
        self.repeated_prefix_tokens_total = 0
        self.by_agent: dict[str, int] = {}
        """Parser errors per agent, for /gateway/status."""
        self._parser = Counter(
            "supervisor_gateway_parser_errors_total",
            "Answers that ended badly while the engine served (content null with "
            "finish_reason stop, a parser error, a 5xx outside a switch), by agent and "
            "kind.", ["agent", "kind"], registry=registry)
        self._degenerate = Counter(
            "supervisor_gateway_degenerate_streams_total",
            "Answers ending in one short unit repeated for hundreds of tokens that the "
            "prompt did not ask for, by agent.", ["agent"], registry=registry)
        self._prefix = Counter(
            "supervisor_gateway_repeated_prefix_tokens_total",
            "Prompt tokens (estimated) that repeat an earlier request's prefix.",
            registry=registry)
        self._overrun = Counter(
            "supervisor_gateway_overrun_answers_total",
            "Answers counted clearly past their request's max_tokens (streams among them "
            "ended by the gateway), by agent.", ["agent"], registry=registry)

    def keep(self, shapes: int) -> None:
        """Keep the last ``shapes`` request shapes from now on (0: none)."""
        if (self.shapes.maxlen or 0) != shapes:
            self.shapes = deque(self.shapes if shapes else (), maxlen=shapes or None)

    def request(self, body: dict[str, Any]) -> str:
        """Count the repeated prefix of an admitted request; returns its prompt text."""
        text = prompt_text(body)
        if self.shapes.maxlen:
            self.shapes.append(request_shape(body))
        tokens = self.prefixes.observe(text) // BYTES_PER_TOKEN
        if tokens:
            self.repeated_prefix_tokens_total += tokens
            self._prefix.inc(tokens)
        return text

    def parser_error(self, agent: str, kind: str) -> None:
        """One answer with a parser error of ``kind`` for ``agent``."""
        self.parser_errors_total += 1
        self.by_agent[agent] = self.by_agent.get(agent, 0) + 1
        self._parser.labels(agent, kind).inc()
        logger.info("gateway: %s answer for agent %s (the engine serves; recorded)", kind,
                    agent)

    def degenerate(self, agent: str, unit: str, repeats: int) -> None:
        """One degenerate answer for ``agent``."""
        self.degenerate_streams_total += 1
        self._degenerate.labels(agent).inc()
        logger.warning("gateway: degenerate answer for agent %s: a %d-character unit "
                       "repeated %d times, not asked for by the prompt", agent, len(unit),
                       repeats)

    def overrun(self, agent: str, count: TokenCount) -> None:
        """One answer for ``agent`` past its ``max_tokens`` (``count``: the tokens counted
        and the limit)."""
        self.overrun_answers_total += 1
        self._overrun.labels(agent).inc()
        logger.warning("gateway: an answer for agent %s ran past its max_tokens: %d tokens "
                       "counted, limit with margin %s (a stream is ended here)", agent,
                       count.tokens, count.limit)

    def watch(self, agent: str, prompt: str, limit: int | None = None) -> AnswerWatch:
        """A watcher for one answer (streamed or whole); ``limit``: the counted tokens
        past which it is over its ``max_tokens`` (``overrun.answer_limit``)."""
        return AnswerWatch(self, agent, prompt, limit)


class AnswerWatch:
    """Reads one answer's SSE events or body for ``Quality`` (each problem once)."""

    def __init__(self, quality: Quality, agent: str, prompt: str,
                 limit: int | None = None) -> None:
        self.q, self.agent, self.prompt = quality, agent, prompt
        self.run = RepeatRun(quality.repeat_units)
        self.count = TokenCount(limit)
        self._pending = bytearray()
        self._content = False
        self._tool = False
        self._stopped = False
        self.done = False

    def feed_sse(self, chunk: bytes) -> None:
        """Some bytes of an SSE stream (events may be split across chunks). Read in
        batches of ``WATCH_BATCH_BYTES`` (and at ``flush``): one JSON parse for a batch
        of events instead of one each (this runs for every token of every stream)."""
        self._pending += chunk
        if len(self._pending) >= WATCH_BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Read the whole events fed so far (``end_stream`` does it too)."""
        data = self._pending
        end = data.rfind(b"\n\n")
        if end < 0:
            if len(data) > 1_000_000:                # one event that never ends
                del data[:-1_000_000]
            return
        lines = [line[5:] for line in bytes(data[:end]).split(b"\n")
                 if line.startswith(b"data:") and b"{" in line[:7]]
        del data[:end + 2]
        if not lines:
            return
        try:
            events = json.loads(b"[" + b",".join(lines) + b"]")
        except (ValueError, RecursionError):     # one bad event must not hide the rest
            events = [json_object(line.strip()) for line in lines]
        for ev in events:
            if isinstance(ev, dict):
                self._event(ev)

    @property
    def past(self) -> bool:
        """Whether the answer read so far is clearly past its ``max_tokens``."""
        return self.count.past

    def _event(self, ev: dict[str, Any]) -> None:
        if self.count.event(ev):
            self.q.overrun(self.agent, self.count)
        err = ev.get("error")
        if err is not None and _PARSER.search(json.dumps(err)):
            self._problem("parser_error")
        for ch in _choices(ev):
            if not isinstance(ch, dict) or ch.get("index", 0) != 0:
                continue
            raw_delta = ch.get("delta")
            delta: dict[str, Any] = raw_delta if isinstance(raw_delta, dict) else {}
            piece = ch.get("text") if isinstance(ch.get("text"), str) else delta.get("content")
            if delta.get("tool_calls"):
                self._tool = True
            if isinstance(piece, str) and piece:
                self._content = True
                self._text(piece)
            if ch.get("finish_reason") == "stop" and "delta" in ch:
                self._stopped = True
        block = ev.get("delta")
        if ev.get("type") == "content_block_delta" and isinstance(block, dict) \
                and isinstance(block.get("text"), str):
            self._content = True
            self._text(block["text"])

    def _text(self, piece: str) -> None:
        hit = self.run.feed(piece)
        if hit is not None and not asked_for(hit[0], self.prompt):
            self.q.degenerate(self.agent, *hit)

    def _problem(self, kind: str) -> None:
        if not self.done:
            self.done = True
            self.q.parser_error(self.agent, kind)

    def end_stream(self) -> None:
        """The stream ended: a chat stream that stopped with neither content nor a tool
        call is ``content_null``."""
        self.flush()
        if self._stopped and not self._content and not self._tool:
            self._problem("content_null")

    def whole(self, status: int, content: bytes, *, switched: bool) -> None:
        """A non-streamed answer (its JSON parsed once for both checks, and only when
        either could find something: the gateway's CPU per request is its latency)."""
        limit = self.count.limit
        if status < 400 and len(content) < self.q.repeat_units \
                and _CONTENT_NULL.search(content) is None \
                and (limit is None or len(content) <= limit):
            return   # too short to end in repeats, no null content, not past max_tokens
        data = json_object(content) if status < 400 else None
        if data is not None and self.count.whole(data):
            self.q.overrun(self.agent, self.count)
        kind = answer_problem(status, content, switched=switched, data=data)
        if kind is not None:
            self._problem(kind)
        if status != 200 or data is None:
            return
        for ch in _choices(data):
            msg = ch.get("message") if isinstance(ch, dict) else None
            text = msg.get("content") if isinstance(msg, dict) else (
                ch.get("text") if isinstance(ch, dict) else None)
            if isinstance(text, str):
                for at in range(0, len(text), 64):
                    self._text(text[at:at + 64])
            break

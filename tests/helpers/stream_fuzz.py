"""Drive the gateway's stream path (agent_supervisor/gateway/streaming.py: ``StreamTap``, the
dialects, the resumption, the answer watch) with one engine stream, in memory: the
engine's response is fed piece by piece into a real ``UpstreamResponse``, a cut stream is
"resumed" at once on a continuation that is malformed too, and the client's bytes are
collected from its transport. Used by tests/unit/test_fuzz_streams.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from dataclasses import dataclass, field

import httpx
from prometheus_client import CollectorRegistry

from agent_supervisor.gateway.listener.connections import CLIENT_TRANSPORT
from agent_supervisor.gateway.metrics import GatewayMetrics, ResumptionLog
from agent_supervisor.gateway.paths import Api
from agent_supervisor.gateway.quality import Quality
from agent_supervisor.gateway.resume.apis import plan_stream
from agent_supervisor.gateway.streaming import stream_response
from agent_supervisor.gateway.upstream import UpstreamError, UpstreamResponse
from agent_supervisor.policy.gateway import GatewaySpec
from tests.helpers.fuzz import STREAMS, Case, mutate, split

__all__ = ["FuzzGateway", "Outcome", "api_of", "run_one"]

#: Seconds one stream may take before it counts as a hang (each takes milliseconds).
HANG_SECONDS = 5.0
_SSE = [(b"content-type", b"text/event-stream; charset=utf-8")]


class _Connection:
    """What an ``UpstreamResponse`` asks of its connection (nothing to do in memory)."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def abort(self) -> None: ...

    def done_with(self, response: UpstreamResponse, *, reuse: bool) -> None: ...


async def _feed(response: UpstreamResponse, pieces: list[bytes], broken: bool) -> None:
    for piece in pieces:
        await asyncio.sleep(0)
        response._feed(piece)
    await asyncio.sleep(0)
    response._finish(UpstreamError("connection reset") if broken else None)


class _Upstream:
    """The engine that came back: answers a continuation with ``next`` stream."""

    def __init__(self, gw: FuzzGateway) -> None:
        self.gw = gw

    async def request(self, method: str, target: str, body: bytes,
                      headers: dict[str, str]) -> UpstreamResponse:
        json.loads(body)                          # the continuation is JSON, whatever came
        response = UpstreamResponse(_Connection(), 200, _SSE)  # type: ignore[arg-type]
        pieces, broken = self.gw.next
        self.gw.tasks.append(asyncio.ensure_future(_feed(response, pieces, broken)))
        return response


def _tokenize(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    name = "tokenize_chat.json" if "messages" in body else "tokenize_text.json"
    return httpx.Response(200, content=(STREAMS / name).read_bytes())


class FuzzGateway:
    """What the stream path reads of a ``Gateway``: a switch is always just over (every
    read of ``epoch`` is a new one), the engine always ready, /tokenize as recorded."""

    def __init__(self) -> None:
        registry = CollectorRegistry()
        self.metrics = GatewayMetrics(registry)
        self.resumptions = ResumptionLog(self.metrics)
        self.quality = Quality(registry, repeat_units=16)
        self.spec = GatewaySpec(hold_timeout_seconds=2, max_resumes_per_request=1)
        self.client = httpx.AsyncClient(transport=httpx.MockTransport(_tokenize))
        self.base_url = "http://engine"
        self.upstream = _Upstream(self)
        self.ready = True
        self.next: tuple[list[bytes], bool] = ([], False)
        self.tasks: list[asyncio.Future[None]] = []
        self._epoch = 0
        self.mode_name = "fast"   # what the visibility headers and SSE comments name
        self.rung = 0
        self.advising = False     # the supervisor acts: a cut stream is resumed (issue 31)

    @property
    def epoch(self) -> int:
        self._epoch += 1
        return self._epoch

    def switched(self, epoch: int) -> bool:
        return False

    async def wait_ready(self) -> bool:
        return True

    async def engine_healthy(self) -> bool:
        return True


class _Client:
    """The client's transport: keeps what the gateway writes (chunked pieces)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


def _unchunk(data: bytes) -> bytes:
    out, at = bytearray(), 0
    while at < len(data):
        end = data.index(b"\r\n", at)
        size = int(data[at:end], 16)
        out += data[end + 2:end + 2 + size]
        at = end + 4 + size
    return bytes(out)


def api_of(path: str) -> Api:
    return {"/v1/messages": Api.ANTHROPIC, "/v1/responses": Api.RESPONSES}.get(path,
                                                                               Api.OPENAI)


@dataclass
class Outcome:
    """One stream's fate: ``error`` escaped the gateway, ``hung``, what the client got,
    and the problems found with it."""

    error: BaseException | None = None
    hung: bool = False
    client: bytes = b""
    problems: list[str] = field(default_factory=list)


def _events(data: bytes) -> list[tuple[str | None, object]]:
    """(event name, data JSON or the data text) of each SSE event the client got."""
    out: list[tuple[str | None, object]] = []
    for raw in data.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, payload = None, None
        for line in raw.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode("utf-8", "replace")
            elif line.startswith(b"data:"):
                text = line[5:].strip()
                try:
                    payload = json.loads(text)
                except (ValueError, RecursionError):
                    payload = text.decode("utf-8", "replace")
        if name is not None or payload is not None:
            out.append((name, payload))
    return out


def check(api: Api, client: bytes) -> list[str]:
    """What is wrong with the client's stream: no last event and no error event, or an
    error event of the gateway's not in the caller's API shape."""
    problems, ended = [], False
    for name, data in _events(client):
        obj = data if isinstance(data, dict) else {}
        kind = obj.get("type")
        if obj.get("src") == "supervisor":
            if api is Api.OPENAI:
                shape = isinstance(obj.get("error"), dict) and name is None
            elif api is Api.ANTHROPIC:
                shape = name == "error" and kind == "error" and \
                    isinstance(obj.get("error"), dict)
            else:
                shape = name == "error" and kind == "error" and "message" in obj
            if not shape:
                problems.append(f"gateway error event not in the {api} shape: {obj}")
        if api is Api.OPENAI:
            ended |= data == "[DONE]"
        elif api is Api.ANTHROPIC:
            ended |= name in ("message_stop", "error") or kind in ("message_stop", "error")
        else:
            ended |= name == "error" or kind in ("error", "response.completed",
                                                 "response.incomplete", "response.failed")
    if not ended:
        problems.append("the client's stream has neither its last event nor an error event")
    return problems


async def run_one(gw: FuzzGateway, case: Case, rng: random.Random) -> Outcome:
    """One mutated stream of ``case`` (and a mutated continuation) through the gateway."""
    raw = json.dumps(case.body).encode()
    # A quarter unrecorded: the gateway's resumption off (the stream passed on as is).
    plan = plan_stream(case.path, case.body, raw) if rng.random() < 0.75 else None
    api = api_of(case.path)
    gw.next = (split(rng, mutate(rng, case.continuation)), rng.random() < 0.2)
    response = UpstreamResponse(_Connection(), 200, _SSE)  # type: ignore[arg-type]
    gw.tasks = [asyncio.ensure_future(_feed(response, split(rng, mutate(rng, case.stream)),
                                            rng.random() < 0.2))]
    watch = gw.quality.watch("fuzz", PROMPT_TEXT)
    streamed = stream_response(gw, api, response, None, plan, {}, "", watch,  # type: ignore[arg-type]
                               case.path)
    client = _Client()
    messages: list[dict] = []

    async def send(message: dict) -> None:
        messages.append(message)

    async def receive() -> dict:
        return {"type": "http.disconnect"}

    outcome = Outcome()
    try:
        await asyncio.wait_for(streamed({CLIENT_TRANSPORT: client}, receive, send),
                               HANG_SECONDS)
    except TimeoutError:
        outcome.hung = True
    except Exception as exc:  # noqa: BLE001 - what the test counts: it must be none
        outcome.error = exc
    for task in gw.tasks:
        task.cancel()
    await asyncio.gather(*gw.tasks, return_exceptions=True)
    outcome.client = _unchunk(bytes(client.data))
    if outcome.error is None and not outcome.hung:
        if not messages or messages[-1].get("more_body", True):
            outcome.problems.append("the response was not completed")
        outcome.problems += check(api, outcome.client)
    return outcome


PROMPT_TEXT = "You are terse.\nI will read the file in main.py"


class Contained(logging.Handler):
    """Counts the errors the gateway caught inside a stream (a parser's exception on a
    malformed event: logged with its traceback), by exception type."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        name = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] \
            else record.getMessage()[:60]
        self.seen[name] = self.seen.get(name, 0) + 1

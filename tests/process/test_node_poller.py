"""Issue 34: the head's node poller never dies on an agent's answer, and the tick completes.

A real HTTP server (http.server in a thread) stands in for the worker's agent on
127.0.0.2 and answers, one kind after the other: a good answer, ``{"sample": null}`` (what
an agent sends before its first sample), wrong-typed values, a body that is not JSON, a
2 MiB body, an answer trickled past ``poll_timeout_seconds``, then a good answer again. The
real ``NodePoller`` polls it in the background; after each kind the node shows the error,
its last good values are kept (ageing), the polling task is alive, and the real
``Sensors.sample`` and ``decide()`` of a tick complete.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.ladder import LadderState
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.sense.nodes import NodePoller
from agent_supervisor.telemetry.window import Window
from tests.helpers.policies import fake_engine_policy
from tests.helpers.ports import free_port

WORKER = "127.0.0.2"
TOKEN = "agent-token-for-the-test"
GOOD = {
    "name": "spark-2",
    "address": WORKER,
    "mem_total_bytes": 128_000_000_000,
    "mem_available_bytes": 96_000_000_000,
    "rank_state": "running",
}


def answer(sample: object) -> bytes:
    return json.dumps({"node": "spark-2", "agent_wall_s": time.time(), "sample": sample}).encode()


class Agent(BaseHTTPRequestHandler):
    """Answers as ``server.kind`` says; records each request's kind in ``server.served``."""

    def do_GET(self) -> None:  # http.server's name
        kind = self.server.kind  # type: ignore[attr-defined]
        body = {
            "good": answer(GOOD),
            "null": answer(None),
            "types": answer({**GOOD, "mem_available_bytes": "lots", "kernel_events": 7}),
            "not_json": b"<html>busy</html>",
            "huge": b" " * (2 << 20) + answer(GOOD),
            "slow": answer(GOOD),
        }[kind]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            if kind == "slow":  # one byte every 0.2 s: 6 s in all
                for i in range(30):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.2)
            else:
                self.wfile.write(body)
        except OSError:
            pass  # the poller gave up on us
        self.server.served.append(kind)  # type: ignore[attr-defined]

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def agent() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer((WORKER, free_port()), Agent)
    server.daemon_threads = True
    server.kind, server.served = "good", []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_issue_34_no_answer_ends_polling_or_makes_the_tick_raise(
    tmp_path: Path, agent: ThreadingHTTPServer
) -> None:
    (tmp_path / "agent.token").write_text(TOKEN + "\n")
    port = agent.server_address[1]
    policy = fake_engine_policy(
        tmp_path,
        sampling={"tick_seconds": 0.2, "kernel_log": False},
        engine={
            "nodes": [
                {"name": "spark-1", "address": "127.0.0.1"},
                {"name": "spark-2", "address": WORKER, "agent_port": port},
            ],
            "distributed": {"agent_token_file": "agent.token", "poll_timeout_seconds": 1.0},
        },
    )
    poller = NodePoller(policy)
    sensors = Sensors(policy, nodes=poller)
    status = EngineLauncher(policy).status()
    expected = {
        "null": "the agent has no sample yet",
        "types": "mem_available_bytes",
        "not_json": "answer: Invalid JSON",
        "huge": "over 1048576 bytes",
        "slow": "no whole answer within 1 s",
        "good": None,
    }
    await sensors.start()
    try:
        await until(lambda: poller.snapshot(time.monotonic())[0].mem_available_bytes is not None)
        started = time.monotonic()
        for kind, error in expected.items():
            agent.kind = kind  # type: ignore[attr-defined]
            began = time.monotonic()

            def shows(error: str | None = error) -> bool:
                node = poller.snapshot(time.monotonic())[0]
                return node.error is None if error is None else error in (node.error or "")

            await until(shows)
            assert poller._task is not None and not poller._task.done(), kind
            now = time.monotonic()
            sample = await sensors.sample(now_s=now, window=Window(), status=status)
            (node,) = sample.nodes or ()
            assert node.mem_available_bytes == 96_000_000_000, kind  # last good, kept
            assert node.age_seconds is not None
            window = Window()
            window.append(sample)
            decision = decide(window, LadderState(rung=0), policy, now)
            print(
                f"{kind}: shown in {now - began:.2f} s, error {node.error!r}, "
                f"age {node.age_seconds} s, decision {decision.action.value}"
            )
        assert {"null", "types", "not_json", "huge"} <= set(agent.served)  # type: ignore
        assert time.monotonic() - started < 30
    finally:
        await sensors.close()
    assert poller._task is not None and poller._task.done()  # closed, not died

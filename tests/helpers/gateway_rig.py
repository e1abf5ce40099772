"""The gateway in this process, over a fake engine run as a subprocess: ``Rig(tmp_path,
engine_args, modes, gateway)`` (async context manager: a fake-engine policy, the gateway
started and released at rung 0, ``rig.metric(name)`` from its registry),
``start_engine(port, *args)`` / ``stop_engine(proc)`` (the fake engine, ready on /health within
10 s; SIGKILL), ``engine_saw(rig)`` (the (method, path) pairs the engine was sent) and
``chat(content, **kw)`` (a chat-completions request body for model "fake-model")."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, generate_latest

from agent_supervisor.gateway.server import Gateway
from tests.helpers.paths import FAKE_ENGINE
from tests.helpers.policies import fake_engine_policy


def start_engine(port: int, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(FAKE_ENGINE), "--port", str(port),
                             "--ready-after", "0", "--no-core", *args],
                            stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("fake engine did not start")


def stop_engine(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


class Rig:
    def __init__(self, tmp_path: Path, engine_args=(), modes=None, gateway=None) -> None:
        self.policy = fake_engine_policy(
            tmp_path, modes=modes or [{"name": "fast", "gateway": {
                "max_concurrency": 2, "max_queue": 1, "queue_timeout_seconds": 1,
                "max_prompt_tokens": 10}}],
            gateway={"drain_timeout_seconds": 5, "hold_timeout_seconds": 10, **(gateway or {})})
        self.engine_args = engine_args
        self.registry = CollectorRegistry()
        self.gw = Gateway(self.policy, rung=0, registry=self.registry)
        self.url = f"http://127.0.0.1:{self.policy.gateway.port}"
        self.engine: subprocess.Popen | None = None

    async def __aenter__(self) -> Rig:
        self.engine = start_engine(self.policy.engine.port, *self.engine_args)
        await self.gw.start()
        self.gw.release(0)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.gw.stop()
        if self.engine is not None and self.engine.poll() is None:
            stop_engine(self.engine)

    def metric(self, text: str) -> float:
        for line in generate_latest(self.registry).decode().splitlines():
            if line.startswith(text + " "):
                return float(line.split()[-1])
        return 0.0


def engine_saw(rig: Rig) -> list[list[str]]:
    """The (method, path) pairs the stand-in engine was sent, oldest first."""
    return httpx.get(f"http://127.0.0.1:{rig.policy.engine.port}/debug/seen").json()["seen"]


def chat(content: str = "hello there", **kw) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": content}], **kw}

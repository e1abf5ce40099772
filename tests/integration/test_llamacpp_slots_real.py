"""Issue 29 on the real llama-server (llama.cpp vendored by llama-cpp-python 0.3.36): the
sensors read ``/slots`` for what it says (two slots, none processing while idle, one while
a generation runs), and the golden canary records its answer keyed by ``/props``'s
``build_info`` and matches it on the next send."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.policy import load_policy
from agent_supervisor.sense.collect import Sensors
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.window import Window
from tests.helpers.paths import ROOT
from tests.helpers.ports import free_port
from tests.helpers.waiting import wait_for

SERVER = ROOT / ".llamacpp" / "bin" / "llama-server"
MODEL = ROOT / ".llamacpp" / "models" / "target-f16.gguf"


@pytest.fixture(autouse=True)
def _llama_built() -> None:
    if not SERVER.exists() or not MODEL.exists():
        pytest.fail("llama-server or its GGUF models are missing: run `make setup` "
                    "(supervisor engine-env --kind llama_cpp)")


def policy(tmp_path: Path):
    data = {
        "fleet": "test",
        "engine": {"kind": "llama_cpp", "executable": str(SERVER),
                   "args": ["--model", str(MODEL), "--alias", "tiny-agent"],
                   "port": free_port(), "start_timeout_seconds": 60,
                   "shutdown_timeout_seconds": 0, "stop_grace_seconds": 3,
                   "kill_timeout_seconds": 10},
        "modes": [{"name": "nospec", "args": {"--parallel": 2, "--ctx-size": 2048}}],
        "gateway": {"port": free_port()}, "admin": {"port": free_port()},
        "storage": {"state_directory": str(tmp_path / "state")},
        "sampling": {"golden_canary": {"interval_seconds": 1.0}},
    }
    return load_policy(yaml.safe_dump(data), base_dir=tmp_path)


async def test_issue_29_slots_and_golden_canary_on_llama_server(tmp_path: Path) -> None:
    pol = policy(tmp_path)
    launcher = EngineLauncher(pol)
    sensors = Sensors(pol, kernel=None)
    await sensors.start()
    window = Window()
    busy: list[int | None] = []
    try:
        await launcher.start(rung=0)
        await wait_for(lambda: launcher.state is EngineState.READY, timeout=60)

        stop = threading.Event()

        def generate() -> None:               # long generations on one slot, back to back
            while not stop.is_set():
                httpx.post(f"http://127.0.0.1:{pol.engine.port}/v1/completions", timeout=120,
                           json={"model": "tiny-agent", "prompt": "Once upon a time",
                                 "max_tokens": 900, "temperature": 0, "ignore_eos": True})

        # Generations until samples see one: processing on three samples in a row (the
        # golden canary's 16 tokens, sent each second, cannot fill three rounds; a single
        # 400-token generation took less than one round on a quiet box: 2026-12-03, make
        # test saw none).
        worker: threading.Thread | None = None
        deadline = time.monotonic() + 45
        try:
            while time.monotonic() < deadline and busy[-3:] != [1, 1, 1]:
                s = await sensors.sample(now_s=time.monotonic(), status=launcher.status(),
                                         window=window)
                window.append(s)
                if worker is not None:
                    busy.append(s.engine_slots_processing)
                if s.golden_canary_match is True and worker is None:
                    worker = threading.Thread(target=generate)
                    worker.start()
                await asyncio.sleep(0.05)
        finally:
            stop.set()
            if worker is not None:
                worker.join(timeout=120)
    finally:
        await sensors.close()
        await launcher.stop()
        await launcher.close()
    samples = list(window)
    idle = [s for s in samples if s.engine_slots_total is not None]
    assert idle and idle[0].engine_slots_total == 2 and idle[0].engine_slots_processing == 0
    assert busy[-3:] == [1, 1, 1], busy       # the generation's slot said processing
    notes = [s.golden_canary_note for s in samples if s.golden_canary_note]
    assert notes[0].startswith("recorded a new golden answer for mode nospec, engine ")
    assert "engine unknown" not in notes[0]   # /props build_info named the build
    assert any(s.golden_canary_match is True for s in samples)

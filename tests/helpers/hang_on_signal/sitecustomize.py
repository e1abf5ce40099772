"""Put on an engine's PYTHONPATH (``engine.environment``): SIGUSR2 makes the process's main
thread block for good in ``engine_loop_blocked``, a hang py-spy can read (issue 31).

A SIGSTOPped process hangs too, but cannot be read: ptrace of a stopped process fails or
waits. Here the process runs on, its main thread (the ``VLLM::EngineCore`` busy loop, where
Python runs signal handlers) stuck in a named function, so the engine makes no progress,
``/health`` stays 200, and the stacks read before the kill name the function. vLLM 0.32
installs no SIGUSR2 handler of its own; a spawned child imports this module again at start.
"""

import signal
import time


def engine_loop_blocked() -> None:
    while True:
        time.sleep(1)


def _hang(signum, frame) -> None:
    engine_loop_blocked()


signal.signal(signal.SIGUSR2, _hang)

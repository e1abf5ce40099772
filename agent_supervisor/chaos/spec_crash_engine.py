"""An engine wrapper for the day benchmark: the real vLLM API server, which crashes on its
first request after a set time when speculative decoding is on.

Run with the *engine's* Python, in place of ``-m MODULE``::

    .engine-venv/bin/python agent_supervisor/chaos/spec_crash_engine.py \
        -m vllm.entrypoints.openai.api_server ARGS...

It runs MODULE as ``__main__`` in this very process (``runpy``: same pid, same process
group, same children as a plain launch, so the supervisor and a plain restart loop see the
engine they would see). When ``--speculative-config`` is among ARGS and the environment
names a file in ``DAY_SPEC_CRASH_FILE``, a thread waits for that file to exist (the
benchmark creates it at the fault's offset) and then watches the server's own
``/metrics``; at the first prompt tokens counted after that it prints the line a GPU
speculative-decoding crash logs and SIGKILLs the ``VLLM::EngineCore`` child. Every later
start with speculation crashes again on its first request: the long-run crash that
repeats with speculation on and never without it (vllm-project/vllm#40756: 'CUDA error:
an illegal memory access was encountered' in EngineCore under MTP/EAGLE after hours;
#22755 and #21986 the same with other drafters). The CPU engine cannot raise the CUDA
error itself, so the text is the documented one, printed as EngineCore's logger prints
(``(EngineCore pid=N) ERROR ...``).

Self-contained on purpose: the engine's environment carries an unrelated package also
named ``supervisor`` (supervisord), so nothing from this project is imported here.
"""

from __future__ import annotations

import os
import re
import runpy
import signal
import sys
import threading
import time
import urllib.request

#: The recorded CUDA error text of the field reports (see the module docstring).
CRASH_LINE = ("(EngineCore pid={pid}) ERROR {stamp} [core.py:1004] EngineCore encountered a "
              "fatal error.\n(EngineCore pid={pid}) ERROR {stamp} [core.py:1004] "
              "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n")
POLL_SECONDS = 0.2
#: Between the logged error and the core's death: a real EngineCore logs the traceback
#: and then shuts down; two seconds let a sampler that reads the log once a second see
#: the line while the engine run is still the current one.
LOG_TO_DEATH_SECONDS = 2.0
_PROMPT = re.compile(r"^vllm:prompt_tokens_total\{[^}]*\} (\S+)$", re.M)


def _prompt_tokens(port: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    values = [float(v) for v in _PROMPT.findall(text)]
    return sum(values) if values else None


def _engine_core() -> int | None:
    """Pid of this process's child titled VLLM::EngineCore (from /proc, no psutil)."""
    me = str(os.getpid())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().split(b"\0")[0].decode(errors="replace")
        except (OSError, IndexError):
            continue
        if ppid == me and title.startswith("VLLM::EngineCore"):
            return int(pid)
    return None


def _watch(port: str, armed: str) -> None:
    """Wait for the file ``armed``, then for the first prompt tokens counted after it
    appeared (an engine not answering yet then has counted none); crash the core."""
    while not os.path.exists(armed):
        time.sleep(POLL_SECONDS)
    seen = _prompt_tokens(port) or 0.0
    while True:
        now = _prompt_tokens(port)
        if now is not None and now > seen:
            core = _engine_core()
            if core is not None:
                stamp = time.strftime("%m-%d %H:%M:%S")
                sys.stderr.write(CRASH_LINE.format(pid=core, stamp=stamp))
                sys.stderr.flush()
                time.sleep(LOG_TO_DEATH_SECONDS)
                os.kill(core, signal.SIGKILL)
                return
        time.sleep(POLL_SECONDS)


def main() -> None:
    """Start the watcher when it applies, then run the engine module as ``__main__``."""
    if len(sys.argv) < 3 or sys.argv[1] != "-m":
        sys.exit("usage: spec_crash_engine.py -m MODULE [ARGS...]")
    module, args = sys.argv[2], sys.argv[3:]
    # This file's directory must not shadow anything the engine imports.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
        os.path.abspath(__file__))]
    armed = os.environ.get("DAY_SPEC_CRASH_FILE")
    if armed and "--speculative-config" in args and "--port" in args:
        port = args[args.index("--port") + 1]
        threading.Thread(target=_watch, args=(port, armed), daemon=True,
                         name="day-spec-crash").start()
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

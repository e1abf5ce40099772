"""llama-server per rung: time to ready and decode speed, against the no-speculation rung.

    flock /tmp/engine.lock .venv/bin/python benchmarks/llamacpp_modes.py [--requests 5]

Each rung of ``policies/cpu-demo-llamacpp.yaml`` but the last (draft model, n-gram, none)
is started on a free port with the supervisor's own argument vector (``build_argv``), timed
from spawn to ``/health`` 200, then sent ``--requests`` chat completions one at a time
(temperature 0, 256 tokens at most, the demo's agent-like prompts). Prints per rung: time
to ready, tokens/s per request (completion tokens from ``usage`` over wall time, and
llama-server's own ``timings.predicted_per_second``), the acceptance of drafted tokens from
``llamacpp:spec_decode_num_*_total`` and the ratio to the no-speculation rung measured in
the same run. Run it on an otherwise idle box: tokens/s on 2 shared cores moves with load.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_supervisor.policy.load import load_policy_file  # noqa: E402
from agent_supervisor.policy.model import build_argv  # noqa: E402
from agent_supervisor.sense.engine_metrics import parse_metrics  # noqa: E402
from agent_supervisor.sense.profiles import profile_for  # noqa: E402

PROMPTS = ["I will read the file in main.py", "Let me run the tests in server.py",
           "I will search the module in utils.py", "Next I will patch the config in cli.py",
           "I will check the log in store.py"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _counters(base: str) -> dict:
    profile = profile_for("llama_cpp")
    return parse_metrics(httpx.get(base + "/metrics", timeout=10).text, table=profile.metrics,
                         per_position=profile.per_position_metric)


def measure(rung: int, requests: int) -> dict:
    policy = load_policy_file(ROOT / "policies" / "cpu-demo-llamacpp.yaml")
    port = _port()
    policy = policy.model_copy(update={"engine": policy.engine.model_copy(update={"port": port})})
    argv = build_argv(policy, policy.modes[rung])
    base = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=policy.working_directory, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"{policy.modes[rung].name}: exited {proc.returncode}")
            time.sleep(0.02)
        ready = time.monotonic() - t0
        before = _counters(base)
        rates, own = [], []
        for i in range(requests):
            t1 = time.monotonic()
            body = httpx.post(base + "/v1/chat/completions", timeout=120, json={
                "model": "tiny-agent", "max_tokens": 256, "temperature": 0,
                "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]}).json()
            rates.append(body["usage"]["completion_tokens"] / (time.monotonic() - t1))
            own.append(body.get("timings", {}).get("predicted_per_second") or 0.0)
        after = _counters(base)
    finally:
        proc.terminate()
        proc.wait(30)
    drafted = (after["spec_decode_num_draft_tokens_total"] or 0) - (
        before["spec_decode_num_draft_tokens_total"] or 0)
    accepted = (after["spec_decode_num_accepted_tokens_total"] or 0) - (
        before["spec_decode_num_accepted_tokens_total"] or 0)
    return {"mode": policy.modes[rung].name, "ready_seconds": ready,
            "tokens_per_second": statistics.median(rates),
            "server_tokens_per_second": statistics.median(own),
            "acceptance": accepted / drafted if drafted else None, "drafted": drafted,
            "argv": " ".join(argv[1:])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5,
                        help="requests per rung, one at a time (default: 5)")
    args = parser.parse_args()
    rows = [measure(rung, args.requests) for rung in (0, 1, 2)]
    plain = rows[-1]["tokens_per_second"]
    print(f"{'mode':8s} {'ready s':>7s} {'tok/s':>7s} {'server':>7s} {'vs none':>7s} "
          f"{'accept':>6s} drafted")
    for r in rows:
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.0%}"
        print(f"{r['mode']:8s} {r['ready_seconds']:7.2f} {r['tokens_per_second']:7.0f} "
              f"{r['server_tokens_per_second']:7.0f} {r['tokens_per_second'] / plain:7.2f} "
              f"{acc:>6s} {r['drafted']:.0f}")
    for r in rows:
        print(f"{r['mode']}: llama-server {r['argv']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

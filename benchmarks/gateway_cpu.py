"""The gateway's own CPU per request and per streamed event, against nginx in one run.

    .venv/bin/python benchmarks/gateway_cpu.py [--requests 3000] [--streams 300]
        [--compare CHECKOUT]

No engine: a canned upstream (a uvloop server here) answers every request at once with a
recorded vLLM 0.32.0 answer: a non-streamed completion, or (``"stream": true``) the 32
events of tests/fixtures/vllm/0.32.0/streams/completions_continuation.sse, one write
each, 2 ms apart, as an engine decoding token by token sends them. A client sends the
same requests one after another through each proxy on one kept-alive connection;
each proxy's process CPU (user and system, from /proc/PID/stat) over the run is divided
by the requests. This is what ``benchmarks/gateway.py`` cannot show on a 2-core box where
the engine, the client and the proxies share the CPU: which part of the added latency
is the gateway's own work, and how far it is from nginx's. ``--compare CHECKOUT`` adds
the gateway of another checkout (``gateway@base``), for an A/B of a change.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.gateway import NGINX_CONF, release_gateway  # noqa: E402
from tests.conftest import free_port  # noqa: E402

STREAM = ROOT / "tests" / "fixtures" / "vllm" / "0.32.0" / "streams" / \
    "completions_continuation.sse"
#: A non-streamed 1-token completion as vLLM 0.32.0 answers it.
BODY = (b'{"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":'
        b'[{"index":0,"text":" the","logprobs":null,"finish_reason":"length",'
        b'"stop_reason":null}],"usage":{"prompt_tokens":4,"total_tokens":5,'
        b'"completion_tokens":1}}')
#: Seconds between a stream's events (an engine decoding about 500 tokens/s).
EVENT_GAP_SECONDS = 0.002


async def canned_upstream(port: int) -> None:
    """Serve the canned answers on ``port`` until cancelled (HTTP/1.1, kept alive)."""
    events = [e + b"\n\n" for e in STREAM.read_bytes().split(b"\n\n") if e.strip()]
    head = b"HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: "
    whole = head + b"application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(BODY), BODY)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                lines = (await reader.readuntil(b"\r\n\r\n")).lower().split(b"\r\n")
                length = next((int(v.split(b":")[1]) for v in lines
                               if v.startswith(b"content-length:")), 0)
                body = await reader.readexactly(length)
                if b'"stream": true' not in body and b'"stream":true' not in body:
                    writer.write(whole)
                    continue
                writer.write(head + b"text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                for event in events:
                    await asyncio.sleep(EVENT_GAP_SECONDS)
                    writer.write(b"%x\r\n%b\r\n" % (len(event), event))
                writer.write(b"0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def cpu_seconds(pids: list[int]) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pids`` so far."""
    user = system = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        user, system = user + int(fields[11]), system + int(fields[12])
    tick = os.sysconf("SC_CLK_TCK")
    return user / tick, system / tick


def exchange(sock: socket.socket, stream: bool) -> None:
    """One request and its whole answer on ``sock``."""
    body = json.dumps({"model": "tiny", "prompt": "I will read", "max_tokens": 32,
                       "stream": stream}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: "
                 b"application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
    buf = b""
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the proxy closed the connection")
        buf += data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            continue
        head = buf[:end].lower()
        if b"transfer-encoding: chunked" in head:
            if buf.endswith(b"\r\n0\r\n\r\n"):
                return
            continue
        length = next(int(v.split(b":")[1]) for v in head.split(b"\r\n")
                      if v.startswith(b"content-length:"))
        if len(buf) >= end + 4 + length:
            return


def measure(port: int, pids: list[int], count: int, stream: bool) -> tuple[float, float]:
    """(CPU us per request, of which user) for ``count`` requests through ``port``."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        for _ in range(20):                                   # warm
            exchange(sock, stream)
        user0, sys0 = cpu_seconds(pids)
        for _ in range(count):
            exchange(sock, stream)
        user1, sys1 = cpu_seconds(pids)
    finally:
        sock.close()
    total = (user1 - user0 + sys1 - sys0) / count * 1e6
    return total, (user1 - user0) / count * 1e6


def start(tmp: Path, procs: list[subprocess.Popen], upstream: int,
          compare: Path | None) -> dict[str, tuple[int, list[int]]]:
    """The gateway (and ``gateway@base``) and nginx; returns name -> (port, pids)."""
    targets: dict[str, tuple[int, list[int]]] = {}
    for name, root in (("gateway", ROOT), ("gateway@base", compare)):
        if root is None:
            continue
        state = tmp / name.replace("@", "-")
        state.mkdir(mode=0o700)
        port = free_port()
        (state / "gw.yaml").write_text(yaml.safe_dump({
            "fleet": "bench", "engine": {"executable": "vllm", "port": upstream},
            "modes": [{"name": "plain"}], "gateway": {"port": port},
            "storage": {"state_directory": str(state)}}))
        proc = subprocess.Popen([sys.executable, "-m", "agent_supervisor", "gateway", "--policy",
                                 str(state / "gw.yaml")], cwd=root, start_new_session=True,
                                stderr=open(state / "gateway.log", "w"))  # noqa: SIM115
        procs.append(proc)
        release_gateway(state)
        targets[name] = (port, [proc.pid])
    nginx = shutil.which("nginx")
    if nginx is not None:
        port = free_port()
        # nginx closes a client's kept-alive connection after 1,000 requests by default.
        (tmp / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, engine=upstream, port=port)
                                        .replace("access_log off;", "access_log off; "
                                                 "keepalive_requests 1000000;"))
        proc = subprocess.Popen([nginx, "-c", str(tmp / "nginx.conf"), "-p", str(tmp), "-g",
                                 "daemon off;"], start_new_session=True)
        procs.append(proc)
        time.sleep(1.0)
        workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)],
                                                  capture_output=True, text=True).stdout.split()]
        targets["nginx"] = (port, workers)
    else:
        print("note: nginx not on PATH (Debian: nginx-light); measured alone")
    return targets


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3000, help="non-streamed, per proxy")
    ap.add_argument("--streams", type=int, default=300, help="streams of 32 events, per proxy")
    ap.add_argument("--compare", type=Path, default=None,
                    help="another checkout whose gateway is measured beside this one's")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gwcpu-"))
    procs: list[subprocess.Popen] = []
    upstream = free_port()
    procs.append(subprocess.Popen([sys.executable, "-c", "import asyncio, sys, uvloop; "
                                   "from benchmarks.gateway_cpu import canned_upstream; "
                                   f"uvloop.run(canned_upstream({upstream}))"], cwd=ROOT,
                                  start_new_session=True))
    try:
        targets = start(tmp, procs, upstream, args.compare)
        rows = {}
        for name, (port, pids) in targets.items():
            rows[name] = (measure(port, pids, args.requests, False),
                          measure(port, pids, args.streams, True))
        events = sum(1 for e in STREAM.read_bytes().split(b"\n\n") if e.strip())
        base = rows.get("nginx")
        print(f"\n{'proxy':14s} {'CPU us/request':>15s} {'(user)':>8s} {'CPU us/event':>13s} "
              f"{'(user)':>8s}  {'vs nginx':>17s}")
        for name, ((whole, whole_user), (stream, stream_user)) in rows.items():
            per_event, per_event_user = stream / events, stream_user / events
            ratio = "" if base is None else \
                f"{whole / base[0][0]:6.1f} x {per_event / (base[1][0] / events):6.1f} x"
            print(f"{name:14s} {whole:15.0f} {whole_user:8.0f} {per_event:13.1f} "
                  f"{per_event_user:8.1f}  {ratio:>17s}")
        print(f"\n{args.requests} non-streamed requests and {args.streams} streams of {events} "
              f"events ({EVENT_GAP_SECONDS * 1e3:g} ms apart) per proxy, one after another "
              "on one kept-alive connection; a stream's CPU is shown per event, its request "
              "included.")
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

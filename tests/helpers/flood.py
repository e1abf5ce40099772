"""Slow and greedy clients for the listener tests (issue 34): raw sockets that send
headers or bodies a byte at a time, headers that never end, connections that never read,
and the measures the tests take (is a socket closed, a process's RSS).

Every function is blocking and plain ``socket``; async tests run them in a thread.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psutil

__all__ = ["CHAT_BODY", "FLOODS", "FloodResult", "big_header", "close_all", "closed",
           "count_closed", "flood", "open_many", "post_head", "rss_bytes", "trickle"]

CHAT_BODY = b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}'


def post_head(path: str, length: int, *, host: str = "127.0.0.1", key: str | None = None,
              extra: bytes = b"") -> bytes:
    """A POST's request line and headers with ``Content-Length: length``."""
    auth = b"" if key is None else b"Authorization: Bearer " + key.encode() + b"\r\n"
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            .encode() + auth + extra + f"Content-Length: {length}\r\n\r\n".encode())


def open_many(address: tuple[str, int], count: int, first: bytes = b"", *,
              rcvbuf: int | None = None) -> list[socket.socket]:
    """``count`` connections, each sent ``first`` (a connection the server refused or
    reset is kept too: the caller counts it as closed)."""
    socks = []
    for _ in range(count):
        s = socket.socket()
        if rcvbuf is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(5)
        try:
            s.connect(address)
            if first:
                s.sendall(first)
        except OSError:
            pass
        socks.append(s)
    return socks


def trickle(socks: Iterable[socket.socket], data: bytes = b"a") -> None:
    """Send ``data`` on each socket that still takes it."""
    for s in socks:
        with contextlib.suppress(OSError):
            s.send(data)


def closed(s: socket.socket, timeout: float = 0.0) -> bool:
    """Whether the server has closed ``s`` (EOF or reset), waiting up to ``timeout``
    (what the server sent before, such as a 408, is read and dropped)."""
    deadline = time.monotonic() + timeout
    while True:
        s.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            if s.recv(65536) == b"":
                return True
        except (TimeoutError, BlockingIOError):
            if time.monotonic() >= deadline:
                return False
        except OSError:
            return True


def count_closed(socks: Iterable[socket.socket]) -> int:
    """How many of ``socks`` the server has closed (no waiting)."""
    return sum(closed(s) for s in socks)


def close_all(socks: Iterable[socket.socket]) -> None:
    for s in socks:
        s.close()


def big_header(address: tuple[str, int], limit_bytes: int = 200 * 2**20) -> int:
    """Send one header that never ends, 1 MiB at a time, up to ``limit_bytes``; returns
    the bytes the server took before it cut the connection."""
    sent = 0
    with socket.create_connection(address, timeout=10) as s:
        try:
            s.sendall(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: ")
            chunk = b"a" * 2**20
            while sent < limit_bytes:
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
    return sent


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` now."""
    return int(psutil.Process(pid).memory_info().rss)


#: The floods of issue 34's acceptance, each as (what a connection sends first, whether
#: it then trickles a byte now and then): slow headers, slow bodies, and many connections
#: that send nothing; the big header is ``big_header``.
FLOODS = {
    "slow_headers": (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a",
                     True),
    "slow_bodies": (post_head("/v1/chat/completions", 10**6) + b"{", True),
    "many_connections": (b"", False),
}


@dataclass
class FloodResult:
    """What an agent saw during one flood, and how the listener's memory grew."""

    probes: int = 0
    served: int = 0
    slowest_seconds: float = 0.0
    rss_growth_bytes: int = 0
    failures: list[str] = field(default_factory=list)


def flood(address: tuple[str, int], kind: str, *, probe: Callable[[], str | None],
          pid: int, connections: int = 1100, seconds: float = 4.0) -> FloodResult:
    """Run flood ``kind`` (a key of ``FLOODS``, or ``big_header``) against ``address``
    for about ``seconds`` while ``probe`` (an agent's request: None when served, else
    why not) runs every 0.25 s; ``pid``'s RSS is sampled all along."""
    result = FloodResult()
    stop = threading.Event()
    base = rss_bytes(pid)
    peak = [base]

    def sample_rss() -> None:
        while not stop.is_set():
            with contextlib.suppress(psutil.Error):
                peak[0] = max(peak[0], rss_bytes(pid))
            time.sleep(0.05)

    def probes() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            why = probe()
            result.probes += 1
            result.slowest_seconds = max(result.slowest_seconds, time.monotonic() - t0)
            if why is None:
                result.served += 1
            else:
                result.failures.append(why)
            time.sleep(0.25)

    threads = [threading.Thread(target=sample_rss), threading.Thread(target=probes)]
    for t in threads:
        t.start()
    socks: list[socket.socket] = []
    try:
        t0 = time.monotonic()
        if kind == "big_header":
            big_header(address)
        else:
            first, slow = FLOODS[kind]
            socks = open_many(address, connections, first)
            # At least ``seconds``, and at least three of the agent's requests (a busy
            # box may take seconds over one), at most 30 s.
            while time.monotonic() - t0 < seconds or (
                    result.probes < 3 and time.monotonic() - t0 < 30):
                time.sleep(0.5)
                if slow:
                    trickle(socks)
        while time.monotonic() - t0 < seconds or (
                result.probes < 3 and time.monotonic() - t0 < 30):
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join()
        close_all(socks)
    result.rss_growth_bytes = peak[0] - base
    return result

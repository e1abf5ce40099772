"""Free TCP ports on 127.0.0.1: ``free_port()`` for one, ``free_ports(n)`` for several
distinct ones at once."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nobody listens on right now (all bound at once:
    ``free_port()`` called twice can answer the same port twice, seen as
    "admin.port 48011 is also engine.port" in a full run)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()

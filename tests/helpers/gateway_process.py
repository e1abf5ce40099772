"""The separate gateway process: ``gateway_url(policy_path)``, ``control(state, method,
url, json_body)`` (status and JSON from its control socket) and ``wait`` (the production
tests' wait with a 120 s default, for a box whose CPU other engines take)."""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path

import yaml

from tests.helpers.production import wait as wait_20


def wait(what: str, predicate, timeout: float = 120.0):
    """As test_production's, with room for a box whose CPU other engines take."""
    return wait_20(what, predicate, timeout)


def gateway_url(path: Path) -> str:
    return f"http://127.0.0.1:{yaml.safe_load(path.read_text())['gateway']['port']}"


class _Unix(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("gateway", timeout=10)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(10)
            sock.connect(str(self.path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


def control(state: Path, method: str, url: str, json_body: dict | None = None) -> tuple:
    """(status, JSON) from the gateway's control socket (raises OSError if none)."""
    conn = _Unix(state / "gateway.sock")
    try:
        conn.request(method, url, body=json.dumps(json_body) if json_body else None,
                     headers={"content-type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()

"""``metric(svc, name)``: the sum of every series of ``name`` on a running real-engine
``Service``'s admin /metrics (0.0 if none)."""

from __future__ import annotations

import httpx


def metric(svc, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{svc.admin_port}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))

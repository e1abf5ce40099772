"""``titled_child(pid, title)``: the pid of ``pid``'s child whose argv[0] is ``title`` (the
fake engine titles its core ``VLLM::EngineCore``), or None."""

from __future__ import annotations

import psutil


def titled_child(pid: int, title: str) -> int | None:
    try:
        kids = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return None
    return next((c.pid for c in kids if c.cmdline()[:1] == [title]), None)

"""Guard test inputs: ``BASELINES`` (tokens/s by concurrency for the "nospec" mode) and
``decoding(per_request_tps, running, **kw)`` (scenario sample fields of an engine finishing
4 requests every 10 s at ``per_request_tps`` each)."""

from __future__ import annotations

BASELINES = {"nospec": [(1.0, 1000.0), (4.0, 600.0)]}


def decoding(per_request_tps, running=4.0, **kw):
    """4 requests finish every 10 s, each at ``per_request_tps`` tokens/s."""
    return {"requests_running": running, "requests_waiting": 0.0,
            "request_tpot_count_total": lambda t: 4.0 * (t // 10),
            "request_tpot_sum_seconds_total": lambda t: 4.0 * (t // 10) / per_request_tps,
            **kw}

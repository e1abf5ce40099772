"""Whether a starting engine is doing work: one pure step, shared by the sensors (live,
each tick) and the start-up guard (replaying a window that lacks the sensors' mark).

Progress between two samples of one run = new log lines (other than vLLM's wait loop),
CPU time of the process tree at ``cpu_ratio`` of a core or more, or RSS grown by
``rss_bytes`` or more. Thresholds come from the policy (``lifecycle``).
"""

from __future__ import annotations

from agent_supervisor.telemetry.sample import Sample

__all__ = ["made_progress"]


def made_progress(prev: Sample, cur: Sample, *, cpu_ratio: float, rss_bytes: int) -> bool:
    """True when ``cur`` shows work done since ``prev`` (same run, ``cur`` later)."""
    dt = max(cur.t_s - prev.t_s, 1e-9)
    lines = (cur.engine_log_lines_total or 0) > (prev.engine_log_lines_total or 0)
    cpu = (cur.engine_cpu_seconds_total is not None
           and prev.engine_cpu_seconds_total is not None
           and cur.engine_cpu_seconds_total - prev.engine_cpu_seconds_total >= cpu_ratio * dt)
    rss = (cur.engine_rss_bytes is not None and prev.engine_rss_bytes is not None
           and cur.engine_rss_bytes - prev.engine_rss_bytes >= rss_bytes)
    return lines or cpu or rss

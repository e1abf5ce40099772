"""Guard ``nodes``: the worker nodes of an engine across boxes (``engine.nodes``).

The head's Sample carries each worker node as the head last heard of it
(``Sample.nodes``, ``telemetry.node_sample``). Judged per node, the worst first:

- **The agent killed its rank at the memory floor** (``node_memory_floor``, emergency): the
  whole engine is killed and restarted one rung down; the evidence is the agent's readings.
  Also when the node's own fresh readings are under ``guards.memory_floor`` on
  ``consecutive_samples`` samples (an agent whose floor is set lower).
- **A worker host froze** (``worker_host_froze``, critical): no answer for
  ``distributed.stale_after_seconds`` while the engine runs; kill every rank (the head's
  ``/health`` stays 200 while a worker host is frozen under unified-memory pressure,
  eugr/spark-vllm-docker#321) with the node's last values as evidence. Between
  ``unknown_after_seconds`` and that bound its values are unknown: no verdict at all.
- **A worker rank exited unasked** (``node_rank_exited``, critical): restart every rank.
- **The ranks wedged** (``ranks_wedged``, critical): ``RPC call to sample_tokens timed out``
  in the head's or a worker rank's log (after minutes of "No available shared memory
  broadcast block found in 60 seconds", a wait vLLM itself calls benign during
  compilation): the collective never completed (eugr/spark-vllm-docker#321,
  vllm#51986); restart every rank, naming the nodes whose rank logged it.
- **Preflight** before every start (``preflight_failed``, start held): every agent answers
  over the interconnect address, its clock within ``max_clock_skew_seconds``, no process of
  its old rank left, its memory back (``lifecycle.memory_return_ratio`` of what it had
  before the last launch, and at least ``node_memory_min_available_bytes``).
Pure: node samples are data; the head's poller measured their age.
"""

from __future__ import annotations

from typing import Any

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.node_sample import Freshness, NodeSample, freshness
from agent_supervisor.telemetry.sample import Sample

__all__ = ["GUARD", "check"]

GUARD = "nodes"
GiB = 2**30


def _last_values(n: NodeSample) -> dict[str, Any]:
    return {"node": n.name, "address": n.address, "age_seconds": n.age_seconds,
            "mem_available_bytes": n.mem_available_bytes, "mem_total_bytes": n.mem_total_bytes,
            "psi_memory_full_avg10_ratio": n.psi_memory_full_avg10_ratio,
            "kernel_events": list(n.kernel_events or ()), "rank_state": n.rank_state,
            "rank_run_id": n.rank_run_id, "node_wall_s": n.wall_s, "error": n.error}


def _fresh(sit: Situation, n: NodeSample) -> Freshness:
    d = sit.policy.engine.distributed
    return freshness(n, unknown_after_s=d.unknown_after_seconds,
                     stale_after_s=d.stale_after_seconds)


def _floor_readings(sit: Situation, name: str) -> list[int]:
    """The node's fresh MemAvailable readings in the window, one per node sample."""
    seen: dict[float, int] = {}
    for x in sit.window:
        for n in x.nodes or ():
            if n.name == name and n.wall_s is not None and n.mem_available_bytes is not None \
                    and _fresh(sit, n) is Freshness.FRESH:
                seen[n.wall_s] = n.mem_available_bytes
    return [seen[k] for k in sorted(seen)]


def _running(sit: Situation, s: Sample, n: NodeSample) -> list[Finding]:
    """Findings about node ``n`` while the engine's ranks run."""
    run, d = s.engine_run_id, sit.policy.engine.distributed
    ours = n.rank_run_id is not None and n.rank_run_id == run
    if ours and n.rank_killed_reason == "memory_floor":
        ev = {**_last_values(n), **(n.rank_kill_evidence or {}), "run_id": run}
        return [Finding(GUARD, "node_memory_floor", Severity.EMERGENCY,
                        f"node {n.name}: its agent killed the rank at the memory floor "
                        f"({(n.rank_kill_evidence or {}).get('mem_available_bytes')} bytes "
                        "available): kill every rank, restart one rung down", ev, run,
                        Response.KILL_STEP_DOWN)]
    cfg = sit.policy.guards.memory_floor
    low = _floor_readings(sit, n.name)[-cfg.consecutive_samples:]
    if len(low) == cfg.consecutive_samples and all(v < cfg.min_available_bytes for v in low):
        ev = {**_last_values(n), "mem_available_bytes": low, "run_id": run,
              "min_available_bytes": cfg.min_available_bytes}
        return [Finding(GUARD, "node_memory_floor", Severity.EMERGENCY,
                        f"node {n.name}: MemAvailable {low[-1] / GiB:.2f} GiB under the floor "
                        f"of {cfg.min_available_bytes / GiB:.2f} GiB on {len(low)} samples",
                        ev, run, Response.KILL_STEP_DOWN)]
    fresh = _fresh(sit, n)
    if fresh is Freshness.STALE:
        ev = {**_last_values(n), "stale_after_seconds": d.stale_after_seconds, "run_id": run}
        return [Finding(GUARD, "worker_host_froze", Severity.CRITICAL,
                        f"node {n.name}: no answer from its agent for {n.age_seconds:.1f} s "
                        f"(bound {d.stale_after_seconds:g} s): the worker host froze; kill "
                        "every rank", ev, run, Response.RESTART)]
    if fresh is Freshness.FRESH and ours and n.rank_state == "exited":
        ev = {**_last_values(n), "exit_code": n.rank_exit_code,
              "exit_signal": n.rank_exit_signal, "run_id": run,
              "rank_log_tags": list(n.rank_log_tags)}
        how = f"signal {n.rank_exit_signal}" if n.rank_exit_signal else \
            f"status {n.rank_exit_code}"
        return [Finding(GUARD, "node_rank_exited", Severity.CRITICAL,
                        f"node {n.name}: its rank exited unasked ({how}): restart every rank",
                        ev, run, Response.RESTART)]
    return []


def _preflight(sit: Situation, s: Sample, n: NodeSample) -> Finding | None:
    """Why node ``n`` holds the next start, or None."""
    d, life = sit.policy.engine.distributed, sit.policy.lifecycle
    ev: dict[str, Any] = {**_last_values(n), "run_id": s.engine_run_id}
    fresh = _fresh(sit, n)
    if fresh is not Freshness.FRESH:
        why = f"the agent at {n.address} does not answer" + (f" ({n.error})" if n.error else "")
        check = "agent_answers"
    elif n.clock_skew_seconds is None or abs(n.clock_skew_seconds) > d.max_clock_skew_seconds:
        why, check = (f"its clock is {n.clock_skew_seconds} s off the head's (bound "
                      f"{d.max_clock_skew_seconds:g} s)"), "clocks"
        ev["clock_skew_seconds"] = n.clock_skew_seconds
    elif n.rank_state == "running" or n.rank_leftover_pids:
        why, check = (f"its old rank is not gone (pids {list(n.rank_leftover_pids or ())}, "
                      f"state {n.rank_state})"), "rank_gone"
    else:
        now, before = n.mem_available_bytes, n.mem_available_before_launch_bytes
        want = d.node_memory_min_available_bytes
        if before is not None:
            want = max(want, int(min(life.memory_return_ratio * before,
                                     before - life.memory_return_slack_bytes)))
        if now is not None and now >= want:
            return None
        why, check = (f"its memory is not back ({now} of {want} bytes wanted)", "memory_back")
        ev["wanted_bytes"] = want
    ev["check"] = check
    return Finding(GUARD, "preflight_failed", Severity.WARNING,
                   f"preflight: node {n.name}: {why}: start held", ev, s.engine_run_id,
                   Response.HOLD_START)


def _wedged(sit: Situation, s: Sample) -> list[Finding]:
    head = any("rpc_timeout" in x.engine_log_tags for x in sit.run_samples())
    named = sorted({n.name for n in s.nodes or () if n.rank_run_id == s.engine_run_id
                    and "rpc_timeout" in n.rank_log_tags})
    if not head and not named:
        return []
    ev = {"node": named[0] if named else None, "nodes_logging_it": named,
          "head_logged_it": head, "nodes": [_last_values(n) for n in s.nodes or ()],
          "run_id": s.engine_run_id}
    where = ", ".join(["the head", *named] if head else named)
    return [Finding(GUARD, "ranks_wedged", Severity.CRITICAL,
                    f"RPC call to the ranks timed out ({where}): the ranks wedged in a "
                    "collective; restart every rank", ev, s.engine_run_id, Response.RESTART)]


def check(sit: Situation) -> list[Finding]:
    """Findings about the worker nodes in the newest sample (see the module docstring)."""
    s = sit.latest
    if s is None or not s.nodes:
        return []
    found: list[Finding] = []
    if s.engine_state in (EngineState.STARTING, EngineState.READY) \
            and s.engine_run_id != sit.ladder.handled_run_id:
        for n in s.nodes:
            found += _running(sit, s, n)
        found += _wedged(sit, s)
    elif s.engine_state is EngineState.STOPPED:
        found += [f for n in s.nodes if (f := _preflight(sit, s, n)) is not None]
    return sorted(found, key=lambda f: -f.severity.rank)

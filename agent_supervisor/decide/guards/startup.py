"""Guard ``startup``: why a start failed, and whether a start still going is stuck.

A failed start (the run never answered /health 200) is classified from the tags of the
log lines it wrote (``agent_supervisor.sense.engine_log``), each class with its own response:

- a bad argument or a missing model: no retry helps (``NO_RETRY``); the finding names
  the flag (argparse prints it: "error: unrecognized arguments: --foo");
- out of memory during CUDA-graph capture (an OOM after "Capturing CUDA graphs" and
  before "Graph capturing finished"): smaller capture sizes / ``--enforce-eager`` first
  (vllm #57475, #49224; vllm's own hint "If out-of-memory error occurs during cudagraph
  capture, consider decreasing gpu_memory_utilization or switching to eager mode",
  vllm #14447);
- too little free memory at start ("Free memory on device ... on startup is less than
  desired GPU memory utilization", vllm #48140, #33297) and other start-up OOMs: fit the
  memory settings to what was free (``RETRY_FALLBACK``);
- NCCL / distributed init: its own kind, an ordinary restart;
- no rung fixes it (issue 29 item A): model files cut short or corrupt, a checkpoint this
  engine version cannot load, a driver/library mismatch, a two-node fabric set up wrong
  (``RETRY_ONCE_THEN_HOLD``: once more as it was, then never a third time) and a poisoned
  compile/JIT cache (``MOVE_CACHE``: relaunched once with the cache moved aside).

A start that fails is judged on the whole failure: the launcher declares it only once the
API server exited too, or a short bound passed (``act/launcher.py``), so the root cause a
dying EngineCore or Worker printed is in the run's log when this guard reads it.

A start still going is stuck only after no progress (new log lines other than vLLM's
"Waiting for core engine" loop, CPU time of its processes, RSS growing) for its budget:
``engine.start_timeout_seconds`` or the mode's learned budget (``ladder.start_budgets``:
``lifecycle.start_budget_factor`` x the longest recent successful start), whichever is
longer. Cold FlashInfer JIT and autotune leave minutes of log silence while the CPU works
(vllm #48031: a GB10 cold start overran vLLM's own 600 s ready wait and succeeded on the
second try).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.progress import made_progress
from agent_supervisor.telemetry.sample import Sample

__all__ = ["GUARD", "check", "failing_lines", "last_progress_s", "start_budget_seconds"]

GUARD = "startup"

#: Log lines kept as evidence with a start-up finding.
EVIDENCE_LINES = 8


def _tags(samples: list[Sample]) -> list[str]:
    return [t for x in samples for t in x.engine_log_tags]


def _lines(samples: list[Sample], limit: int = EVIDENCE_LINES) -> list[str]:
    """The newest log lines of the samples that carried a tag (the failure's own lines)."""
    lines = [ln for x in samples if x.engine_log_tags for ln in x.engine_log_lines]
    return lines[-limit:]


#: An exception's own line ("SafetensorError: ...", "RuntimeError: ...") or NCCL's
#: warning: the lines an operator must read, not the traceback's frames.
_FAILING_LINE = re.compile(r"\w(?:Error|Exception)\b: |NCCL WARN |version mismatch")


def failing_lines(samples: list[Sample], limit: int = EVIDENCE_LINES, *,
                  tagged_only: bool = True) -> list[str]:
    """The failure's own lines, oldest first (the root cause comes before the API
    server's 'Engine core initialization failed'), each once, at most ``limit``;
    ``tagged_only``: from the samples whose lines carried a known tag."""
    lines = [ln for x in samples if x.engine_log_tags or not tagged_only
             for ln in x.engine_log_lines if _FAILING_LINE.search(ln)]
    return list(dict.fromkeys(ln.strip() for ln in lines))[:limit]


def _graph_oom(tags: list[str]) -> bool:
    """An OOM while CUDA graphs were being captured (after the start, before the end)."""
    if "cuda_graph_capture_oom" in tags:
        return True
    capturing = False
    for tag in tags:
        if tag == "cuda_graph_capturing":
            capturing = True
        elif tag == "cuda_graph_captured":
            capturing = False
        elif tag == "out_of_memory" and capturing:
            return True
    return False


#: (log tag, finding kind, response, summary, what to fix) of the start failures no rung
#: fixes (issue 29 item A), checked before the memory classes: a corrupt file or a driver
#: mismatch can drag an OOM-looking line behind it, never the other way round.
_HOLD_KINDS: tuple[tuple[str, str, Response, str, str], ...] = (
    ("driver_mismatch", "engine_driver_mismatch", Response.RETRY_ONCE_THEN_HOLD,
     "the GPU driver and the libraries the engine loads do not match",
     "the driver: reboot after a driver update, or use an image built for this driver"),
    ("model_files_corrupt", "engine_model_files_corrupt", Response.RETRY_ONCE_THEN_HOLD,
     "the model's files are incomplete or corrupt",
     "the model files: download the model again (a shard is cut short or missing)"),
    ("checkpoint_incompatible", "engine_checkpoint_incompatible",
     Response.RETRY_ONCE_THEN_HOLD, "this engine version cannot load the checkpoint",
     "the model or the image: a checkpoint this engine version loads (shapes, keys or "
     "quantization config differ)"),
    ("compile_cache_corrupt", "engine_compile_cache_corrupt", Response.MOVE_CACHE,
     "the engine's compile/JIT cache is poisoned",
     "the image or the compile cache: moving the cache aside did not help"),
    ("nccl_fabric", "engine_nccl_fabric", Response.RETRY_ONCE_THEN_HOLD,
     "NCCL cannot reach the other node over the fabric",
     "the fabric settings: NCCL_IB_GID_INDEX, NCCL_IB_HCA, NCCL_SOCKET_IFNAME"),
)


def _classify(tags: list[str]) -> tuple[str, Severity, Response, dict[str, Any], str] | None:
    """(kind, severity, response, evidence, summary) of a failed start, or None."""
    bad = [t for t in tags if t.split(":", 1)[0] == "bad_argument"]
    if bad:
        flags = [t.split(":", 1)[1] for t in bad if ":" in t]
        flag = flags[0] if flags else None
        what = f"the engine refused the argument {flag}" if flag else \
            "the engine refused its configuration"
        return ("engine_bad_argument", Severity.CRITICAL, Response.NO_RETRY,
                {"flag": flag}, what + ": no retry")
    if "container_refused" in tags:
        return ("engine_container_refused", Severity.CRITICAL, Response.NO_RETRY,
                {"flag": None}, "the container engine refused to run the engine (image "
                "missing, permission, runtime error): no retry")
    if "model_not_found" in tags:
        return ("engine_model_not_found", Severity.CRITICAL, Response.NO_RETRY, {"flag": None},
                "the engine cannot find its model: no retry")
    held = next((d for d in _HOLD_KINDS if d[0] in tags), None)
    if held is not None:
        tag, kind, response, summary, fix = held
        return (kind, Severity.CRITICAL, response, {"signature": tag, "fix": fix},
                summary)
    if _graph_oom(tags):
        return ("startup_cuda_graph_oom", Severity.CRITICAL, Response.RETRY_FALLBACK,
                {"class": "cuda_graph_capture_oom"}, "out of memory while capturing CUDA graphs")
    if "insufficient_memory_at_startup" in tags:
        return ("startup_insufficient_memory", Severity.CRITICAL, Response.RETRY_FALLBACK,
                {"class": "insufficient_memory_at_startup"},
                "too little free memory for the engine at start")
    if "out_of_memory" in tags:
        return ("startup_out_of_memory", Severity.CRITICAL, Response.RETRY_FALLBACK,
                {"class": "out_of_memory"}, "out of memory while the engine started")
    if "nccl_init_failed" in tags:
        return ("engine_nccl_init_failed", Severity.CRITICAL, Response.RESTART, {},
                "NCCL / distributed init failed while the engine started")
    return None


def start_budget_seconds(sit: Situation) -> tuple[float, str]:
    """The no-progress budget of a start of the current mode, and where it comes from."""
    floor = sit.policy.engine.start_timeout_seconds
    learned = sit.ladder.start_budget(sit.mode.name)
    if learned is not None and learned > floor:
        return learned, "learned from past starts"
    return floor, "engine.start_timeout_seconds"


def last_progress_s(samples: list[Sample], sit: Situation) -> float | None:
    """Monotonic time of the last work seen: the sensors' mark when the newest sample
    has one, else the last sample of the window that showed work, else the run's spawn.

    The window can be shorter than a start; a trace without the sensors' mark then
    counts from the spawn when no work is in the window (a start quiet for the whole
    window is quiet, whatever came before it)."""
    if not samples:
        return None
    cfg = sit.policy.lifecycle
    spawn = samples[0].engine_state_since_s
    if spawn is None:
        spawn = samples[0].t_s
    live = samples[-1].engine_progress_s
    if live is not None:
        return max(live, spawn)
    mark = spawn
    for prev, cur in itertools.pairwise(samples):
        if made_progress(prev, cur, cpu_ratio=cfg.progress_cpu_ratio,
                         rss_bytes=cfg.progress_rss_bytes):
            mark = cur.t_s
    return mark


def _stuck(sit: Situation, s: Sample) -> list[Finding]:
    samples = [x for x in sit.run_samples() if x.engine_state is EngineState.STARTING]
    mark = last_progress_s(samples, sit)
    if mark is None:
        return []
    budget, why = start_budget_seconds(sit)
    quiet = sit.now_s - mark
    if quiet < budget:
        return []
    evidence = {"run_id": s.engine_run_id, "mode": sit.mode.name,
                "seconds_without_progress": round(quiet, 1), "budget_seconds": budget,
                "budget_from": why, "log_lines_total": s.engine_log_lines_total,
                "cpu_seconds_total": s.engine_cpu_seconds_total,
                "engine_rss_bytes": s.engine_rss_bytes,
                "seconds_starting": None if s.engine_state_since_s is None
                else round(sit.now_s - s.engine_state_since_s, 1)}
    return [Finding(GUARD, "start_timeout", Severity.CRITICAL,
                    f"engine start made no progress for {quiet:.0f} s (no log line, no CPU "
                    f"work, no memory growth; budget {budget:g} s, {why})", evidence,
                    s.engine_run_id, Response.RESTART)]


def check(sit: Situation) -> list[Finding]:
    """A failed start's class, or a stuck start; at most one finding."""
    s = sit.latest
    if s is None or s.engine_run_id is None or s.engine_run_id == sit.ladder.handled_run_id:
        return []
    if s.engine_state is EngineState.STARTING:
        return _stuck(sit, s)
    if s.engine_state is not EngineState.CRASHED or s.engine_was_ready:
        return []
    run = sit.run_samples()
    found = _classify(_tags(run))
    if found is None:
        return []
    kind, severity, response, extra, summary = found
    evidence = {"run_id": s.engine_run_id, "mode": sit.mode.name, **extra,
                "tags": sorted(set(_tags(run))), "log_lines": _lines(run),
                "failing_lines": failing_lines(run),
                "mem_available_before_launch_bytes": s.mem_available_before_launch_bytes}
    return [Finding(GUARD, kind, severity, summary, evidence, s.engine_run_id, response)]

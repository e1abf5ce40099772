"""``Sensors``: every sensor together, producing one ``Sample`` per tick.

A sensor that cannot read leaves its fields None and says why once; no sensor failure
ever breaks the tick (issue 34: ``psutil.cpu_percent`` raised EMFILE under 1,100 client
connections with ``ulimit -n 1024``, so no tick ran and no watchdog ping was sent: each
sensor's read now goes through ``SensorGuard``, which turns any exception into unknown
fields for that tick, with the reason logged when it starts and when it ends). The slow
or blocking ones are bounded: HTTP probes by their timeouts, NVML by running in a worker
thread that is not waited on past the probe timeout, the canary by running as a
background task whose result lands in a later Sample.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from agent_supervisor.errors import MetricsParseError, ScrapeError
from agent_supervisor.policy import Policy, PolicyHolder
from agent_supervisor.sense.engine_log import classify_engine_line, is_progress
from agent_supervisor.sense.engine_metrics import parse_metrics
from agent_supervisor.sense.gateway_load import GatewayLoadSource, gateway_fields
from agent_supervisor.sense.golden import GoldenCanary
from agent_supervisor.sense.gpu import GpuReading, GpuSensor
from agent_supervisor.sense.host import HostReader, processes_rss_bytes
from agent_supervisor.sense.kernel_log import KernelLogFollower
from agent_supervisor.sense.log_tail import LogTail
from agent_supervisor.sense.nodes import NodePoller
from agent_supervisor.sense.probes import (
    canary,
    probe_health,
    probe_loop,
    scrape_metrics,
    served_model,
)
from agent_supervisor.sense.process_tree import read_process_tree
from agent_supervisor.sense.profiles import profile_for
from agent_supervisor.sense.reclassify import kernel_event_tag
from agent_supervisor.sense.slots import slot_fields
from agent_supervisor.states import EngineState, EngineStatus
from agent_supervisor.telemetry.load import load_of
from agent_supervisor.telemetry.progress import made_progress
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.stall import stall_of
from agent_supervisor.telemetry.window import Window

__all__ = ["SensorGuard", "Sensors", "kernel_event_tag"]

logger = logging.getLogger(__name__)

#: Kernel and engine log lines kept for incident evidence.
EVIDENCE_LINES = 50
#: Raw engine log lines a Sample carries per tick (for replay to re-classify): the newest
#: ones. A start-up traceback is tens of lines; a flood (a debug-level engine) is cut.
RAW_LINES_PER_TICK = 200


def _launcher_fields(status: EngineStatus, leftovers: Any) -> dict[str, Any]:
    """The launcher's facts about the run, and what its group left alive (issue 12)."""
    fields: dict[str, Any] = {
        "engine_state": status.state, "engine_state_since_s": status.since_s,
        "engine_run_id": status.run_id, "engine_rung": status.rung,
        "engine_pid": status.pid, "engine_exit_code": status.exit_code,
        "engine_exit_signal": status.exit_signal, "engine_crash_reason": status.crash_reason,
        "engine_was_ready": status.was_ready, "engine_sigterm_ignored": status.sigterm_ignored,
        "mem_available_before_launch_bytes": status.mem_available_before_bytes,
        "processes_rss_before_launch_bytes": status.processes_rss_before_bytes,
        "engine_cgroup_memory_bytes": status.cgroup_memory_bytes,
    }
    if leftovers is not None:
        fields.update(engine_leftover_pids=tuple(leftovers.pids),
                      engine_leftover_stuck_pids=tuple(leftovers.stuck),
                      engine_leftover_roles=tuple(leftovers.roles),
                      engine_leftover_rss_bytes=leftovers.rss_bytes)
    return fields


class SensorGuard:
    """Runs each sensor's read: a read that raises gives no fields (unknown, never 0)
    this tick, logged as a WARNING when that sensor starts failing (or fails another
    way) and as INFO when it reads again, never once a tick."""

    def __init__(self) -> None:
        self.failing: dict[str, str] = {}
        """Sensor name -> the reason it failed on its last read."""

    def read(self, name: str, read: Any, *args: Any) -> dict[str, Any]:
        """``read(*args)``'s fields, or {} when it raised."""
        try:
            out = read(*args)
        except Exception as exc:  # noqa: BLE001 - any sensor, any failure: EMFILE, ENOMEM
            return self._failed(name, exc)
        self._ok(name)
        return dict(out)

    async def aread(self, name: str, read: Any, *args: Any) -> dict[str, Any]:
        """``await read(*args)``'s fields, or {} when it raised."""
        try:
            out = await read(*args)
        except Exception as exc:  # noqa: BLE001 - as in read()
            return self._failed(name, exc)
        self._ok(name)
        return dict(out)

    def _failed(self, name: str, exc: Exception) -> dict[str, Any]:
        why = f"{type(exc).__name__}: {exc}"
        if self.failing.get(name) != why:
            logger.warning("sensor %s failed (%s): its fields are unknown until it reads "
                           "again", name, why)
        self.failing[name] = why
        return {}

    def _ok(self, name: str) -> None:
        if self.failing.pop(name, None) is not None:
            logger.info("sensor %s reads again", name)


@dataclass
class _Canary:
    run_id: str
    task: asyncio.Task[tuple[bool, float, str | None]] | None = None
    ok: bool | None = None
    latency_seconds: float | None = None
    error: str | None = None
    finished_s: float | None = None


class Sensors:
    """Host, process tree, probes, canary, GPU, kernel log, engine log and gateway load.

    ``await start()`` once, ``await sample(...)`` each tick, ``await close()`` at the end.
    ``recent_kernel_lines`` and ``recent_engine_signatures`` keep the last lines that
    were classified, for incident evidence.
    """

    def __init__(
        self,
        policy: Policy | PolicyHolder,
        *,
        gpu: GpuSensor | None = None,
        kernel: KernelLogFollower | None = None,
        gateway: GatewayLoadSource | None = None,
        nodes: NodePoller | None = None,
        engine_log: Callable[[], LogTail | None] | None = None,
    ) -> None:
        self._policy = PolicyHolder.of(policy)
        self._engine_log = engine_log
        """The current run's log (``LogTail``; None: no run, no log): these sensors are
        its one reader, polled at each ``sample``."""
        self.nodes = nodes
        self.gpu = gpu
        self.kernel = kernel
        self.gateway = gateway
        self.kernel_source: str | None = None
        self.recent_kernel_lines: deque[str] = deque(maxlen=EVIDENCE_LINES)
        self.recent_engine_signatures: deque[tuple[str, str]] = deque(maxlen=EVIDENCE_LINES)
        self._host = HostReader()
        self._guard = SensorGuard()
        self._http: httpx.AsyncClient | None = None
        self._core_seen: set[str] = set()
        self._models: dict[str, str | None] = {}
        self._canary: _Canary | None = None
        self._golden = GoldenCanary(lambda: self.policy, lambda: self._http)
        self._gpu_busy: asyncio.Task[GpuReading] | None = None
        self._pss: tuple[str | None, float, int | None] | None = None   # run, time, bytes
        self._lines: tuple[str | None, int] = (None, 0)       # run, progress lines so far
        self._progress: tuple[str | None, float] = (None, 0.0)   # run, last work seen

    @property
    def policy(self) -> Policy:
        """The policy in force (read on use: a reload swaps the holder's)."""
        return self._policy.current

    async def start(self) -> None:
        """Open the HTTP client, probe the GPU (in a thread) and start the kernel log."""
        self._http = httpx.AsyncClient()
        if self.gpu is not None:
            await asyncio.to_thread(self.gpu.start)
        if self.kernel is not None:
            self.kernel_source = self.kernel.start()
        if self.nodes is not None:
            await self.nodes.start()

    async def close(self) -> None:
        """Stop background work and release NVML, the kernel log and the HTTP client."""
        if self._canary is not None and self._canary.task is not None:
            self._canary.task.cancel()
            await asyncio.gather(self._canary.task, return_exceptions=True)
        self._golden.close()
        if self.kernel is not None:
            self.kernel.close()
        if self.gpu is not None:
            self.gpu.close()
        if self.nodes is not None:
            await self.nodes.close()
        if self._http is not None:
            await self._http.aclose()

    async def sample(
        self,
        *,
        now_s: float,
        status: EngineStatus,
        window: Window,
        log_lines: list[str] | None = None,
        lateness_seconds: float | None = None,
        leftovers: Any = None,
    ) -> Sample:
        """One Sample of everything. ``window`` holds the previous samples (it decides
        whether a canary is due); ``log_lines``: the engine's new log lines (None: read
        here from ``engine_log``, the one reader of the run's log; tests and the agent's
        node sampler pass their own);
        ``leftovers`` what is left of a run the launcher no longer runs
        (``agent_supervisor.act.processes.Leftovers``: pids, stuck, roles, rss_bytes)."""
        guard = self._guard
        if log_lines is None:
            tail = None if self._engine_log is None else self._engine_log()
            log_lines = [] if tail is None else tail.poll()
        fields: dict[str, Any] = {
            "t_s": now_s, "wall_s": time.time(), "tick_lateness_seconds": lateness_seconds,
            **_launcher_fields(status, leftovers)}
        if status.state is EngineState.STOPPED and status.run_id is not None:
            fields.update(guard.read("processes", lambda: {
                "processes_rss_bytes": processes_rss_bytes()}))
        fields.update(guard.read("host", self._host.read))
        tree = guard.read("process_tree", self._tree_fields, now_s, status)
        pids: tuple[int, ...] = tree.pop("pids", ())
        fields.update(tree)
        if status.state is EngineState.READY and self._http is not None:
            fields.update(await guard.aread("probes", self._probe, self._http))
        fields.update(guard.read("canary", self._canary_fields, now_s, status, window))
        fields.update(guard.read("golden_canary", self._golden.fields, now_s, status,
                                 not self._stalled(window, now_s)))
        fields.update(await guard.aread("gpu", self._gpu_fields, pids))
        fields.update(guard.read("logs", self._log_fields, log_lines))
        fields.update(guard.read("gateway", gateway_fields, self.gateway))
        fields.update(guard.read("start_progress", self._start_progress, status, log_lines,
                                 fields, window))
        if self.nodes is not None:
            nodes = self.nodes
            fields.update(guard.read("nodes", lambda: {"nodes": nodes.snapshot(now_s)}))
        return Sample(**fields)

    def _tree_fields(self, now_s: float, status: EngineStatus) -> dict[str, Any]:
        """The engine's process tree (RSS by role, PSS every ``pss_interval_seconds``)
        while it starts or serves; ``pids`` for the GPU's per-process memory."""
        if status.pid is None or status.state not in (EngineState.STARTING,
                                                      EngineState.READY):
            return {}
        pss_due = (self._pss is None or self._pss[0] != status.run_id
                   or now_s - self._pss[1] >= self.policy.sampling.pss_interval_seconds)
        tree = read_process_tree(status.pid, pss=pss_due)
        if pss_due:
            self._pss = (status.run_id, now_s, tree.pss_bytes)
        if tree.engine_core_alive and status.run_id:
            self._core_seen.add(status.run_id)
        # An engine that never had an EngineCore (the in-process engine) has none to
        # lose; and with the API server itself gone, the exit watcher reports.
        core_known = status.run_id in self._core_seen and tree.api_server_alive
        return {"pids": tree.pids,
                "engine_core_alive": tree.engine_core_alive if core_known else None,
                "engine_processes": tree.processes, "engine_rss_bytes": tree.rss_bytes,
                "engine_pss_bytes": self._pss[2] if self._pss else None,
                "api_server_rss_bytes": tree.api_server_rss_bytes,
                "engine_core_rss_bytes": tree.engine_core_rss_bytes,
                "engine_workers_rss_bytes": tree.workers_rss_bytes,
                "engine_rss_anon_bytes": tree.rss_anon_bytes,
                "engine_swap_bytes": tree.swap_bytes,
                "engine_cpu_seconds_total": tree.cpu_seconds}

    def _start_progress(self, status: EngineStatus, log_lines: list[str],
                        fields: dict[str, Any], window: Window) -> dict[str, Any]:
        """Progress lines of the run so far and, while it starts, the last tick it worked."""
        run = status.run_id
        if self._lines[0] != run:
            self._lines = (run, 0)
            self._progress = (run, status.since_s)
        total = self._lines[1] + sum(1 for line in log_lines if is_progress(line))
        self._lines = (run, total)
        out: dict[str, Any] = {"engine_log_lines_total": total if run else None}
        if status.state is not EngineState.STARTING:
            return out
        prev = window.latest
        cfg = self.policy.lifecycle
        now = Sample(**{**fields, **out})
        if prev is not None and prev.engine_run_id == run and made_progress(
                prev, now, cpu_ratio=cfg.progress_cpu_ratio, rss_bytes=cfg.progress_rss_bytes):
            self._progress = (run, now.t_s)
        out["engine_progress_s"] = self._progress[1]
        return out

    async def _probe(self, client: httpx.AsyncClient) -> dict[str, Any]:
        eng = self.policy.engine
        profile = profile_for(eng.kind)
        base = f"http://{eng.host}:{eng.port}"
        timeout = self.policy.sampling.probe_timeout_seconds
        probes = [probe_health(client, base, timeout), scrape_metrics(client, base, timeout)]
        if profile.loop_probe_path is not None:
            probes.append(probe_loop(client, base, profile.loop_probe_path, timeout))
        health, metrics, *loop = await asyncio.gather(*probes, return_exceptions=True)
        out: dict[str, Any] = {}
        if isinstance(health, tuple):
            out["health_status"], out["health_latency_seconds"] = health
        if loop and isinstance(loop[0], tuple):
            out["engine_loop_answered"] = loop[0][0]
            if profile.loop_probe_path == "/slots":
                out.update(slot_fields(loop[0][2]))
        if isinstance(metrics, str):
            try:
                out.update(parse_metrics(metrics, table=profile.metrics,
                                         per_position=profile.per_position_metric))
            except MetricsParseError as exc:
                out["metrics_error"] = str(exc)
        elif isinstance(metrics, ScrapeError):
            out["metrics_error"] = str(metrics)
        return out

    def _canary_fields(self, now_s: float, status: EngineStatus,
                       window: Window) -> dict[str, Any]:
        """Start a canary if progress looks stalled; report the last finished one."""
        c = self._canary
        if c is None or c.run_id != status.run_id:
            if c is not None and c.task is not None:
                c.task.cancel()
            c = self._canary = _Canary(run_id=status.run_id or "")
        if c.task is not None and c.task.done():
            if not c.task.cancelled():
                c.ok, c.latency_seconds, c.error = c.task.result()
                c.finished_s = now_s
                logger.info("canary of run %s: %s in %.2f s%s", c.run_id,
                            "answered" if c.ok else "FAILED", c.latency_seconds,
                            f" ({c.error})" if c.error else "")
            c.task = None
        if c.task is None and status.state is EngineState.READY and self._stalled(window, now_s):
            since = None if c.finished_s is None else now_s - c.finished_s
            if since is None or since >= self.policy.sampling.canary_after_seconds:
                c.task = asyncio.get_running_loop().create_task(self._send_canary(status))
        return {"canary_pending": c.task is not None, "canary_ok": c.ok,
                "canary_latency_seconds": c.latency_seconds, "canary_finished_s": c.finished_s}

    def _stalled(self, window: Window, now_s: float) -> bool:
        """Requests present, yet no progress (the hung guard's rule, telemetry/stall.py)
        for ``canary_after_seconds`` by ``now_s`` (this tick's sample is not taken yet)."""
        latest = window.latest
        if latest is None or latest.engine_state is not EngineState.READY:
            return False
        smp = self.policy.sampling
        stall = stall_of([x for x in window if x.engine_run_id == latest.engine_run_id],
                         now_s, smp.probe_timeout_seconds + 2 * smp.tick_seconds)
        return stall is not None and bool(load_of(stall.last)) \
            and now_s - stall.since_s >= smp.canary_after_seconds

    async def _send_canary(self, status: EngineStatus) -> tuple[bool, float, str | None]:
        assert self._http is not None  # started before any sample
        eng, smp = self.policy.engine, self.policy.sampling
        base = f"http://{eng.host}:{eng.port}"
        run_id = status.run_id or ""
        if run_id not in self._models:
            self._models[run_id] = await served_model(self._http, base, smp.probe_timeout_seconds)
        model = self._models[run_id]
        if model is None:
            return False, 0.0, "no model id from /v1/models"
        logger.info("progress stalled with requests waiting: canary to run %s", run_id)
        return await canary(self._http, base, model, smp.canary_timeout_seconds)

    async def _gpu_fields(self, pids: tuple[int, ...]) -> dict[str, Any]:
        if self.gpu is None or not self.gpu.available:
            return {}
        if self._gpu_busy is not None and not self._gpu_busy.done():
            logger.warning("NVML read still running from an earlier tick: skipped")
            return {}
        self._gpu_busy = asyncio.ensure_future(asyncio.to_thread(self.gpu.read, pids))
        try:
            reading = await asyncio.wait_for(asyncio.shield(self._gpu_busy),
                                             self.policy.sampling.probe_timeout_seconds)
        except TimeoutError:
            logger.warning("NVML read took longer than %g s: GPU fields unknown this tick",
                           self.policy.sampling.probe_timeout_seconds)
            return {}
        return {name: getattr(reading, name) for name in GpuReading.__dataclass_fields__}

    def _log_fields(self, log_lines: list[str]) -> dict[str, Any]:
        tags: list[str] = []
        for line in log_lines:
            for tag in classify_engine_line(line):
                self.recent_engine_signatures.append((tag, line))
                if tag not in tags:
                    tags.append(tag)
        events: tuple[str, ...] | None = None
        raw_kernel: tuple[str, ...] = ()
        if self.kernel is not None:
            if self.kernel.source != "unavailable":
                polled = self.kernel.poll()
                self.recent_kernel_lines.extend(e.message for e in polled)
                raw_kernel = tuple(getattr(self.kernel, "last_lines", ()))
                # One OOM kill prints two lines naming the same pid: one event.
                events = tuple(dict.fromkeys(kernel_event_tag(e) for e in polled))
            self.kernel_source = self.kernel.source   # it can give up while running
            if self.kernel_source == "unavailable":
                events = None
        return {"engine_log_tags": tuple(tags), "kernel_events": events,
                "kernel_log_source": self.kernel_source,
                "engine_log_lines": tuple(log_lines[-RAW_LINES_PER_TICK:]),
                "kernel_lines": raw_kernel}

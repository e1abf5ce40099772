"""``NodeAgent``: samples this worker node, runs its rank, and keeps its own floor.

Every ``distributed.sample_seconds`` it reads MemAvailable and PSI (``/proc/meminfo``,
``/proc/pressure/memory``: on GB10 unified memory NVML reports no device memory), the
kernel log (Xid, NV_ERR_NO_MEMORY, OOM kills), NVML where there is a GPU, the rank's
process tree and the rank's new log lines. MemAvailable under
``distributed.local_min_available_bytes`` on ``local_consecutive_samples`` samples in a
row SIGKILLs the rank's group at once, whatever the head says or whether it answers: a
GB10 host was seen to freeze about 5 s after its memory ran out, and a worker host that
freezes takes the whole engine with it (eugr/spark-vllm-docker#321; NVIDIA/
dgx-spark-playbooks#97). The head learns of the kill from the next sample it reads
(``rank_state: killed``, ``rank_killed_reason: memory_floor`` and the readings).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from pathlib import Path
from typing import Any

from agent_supervisor.act.container import ContainerEngine
from agent_supervisor.act.engine_env import engine_environment, make_run_tmp_dir
from agent_supervisor.act.node_argv import node_environment, rank_argv
from agent_supervisor.agent.rank import LocalRank
from agent_supervisor.policy import Policy
from agent_supervisor.sense.engine_log import classify_engine_line
from agent_supervisor.sense.gid import SYSFS_INFINIBAND
from agent_supervisor.sense.gpu import GpuSensor
from agent_supervisor.sense.host import MEMINFO, HostReader
from agent_supervisor.sense.kernel_log import KernelLogFollower
from agent_supervisor.sense.process_tree import read_process_tree
from agent_supervisor.sense.reclassify import kernel_event_tag
from agent_supervisor.telemetry.node_sample import NodeSample

__all__ = ["NodeAgent"]

logger = logging.getLogger(__name__)

#: Kernel events and rank log lines kept for the head (and its incidents).
KEEP_LINES = 200
#: Kernel events a sample reports: those of the last this many seconds.
EVENT_WINDOW_SECONDS = 30.0


class NodeAgent:
    """The agent's state: the node's rank, its samples, its recent lines.

    ``await start()``, then ``await step()`` every ``sample_seconds`` (``run`` loops it),
    ``await close()`` at the end. The HTTP app (``agent.app``) calls ``sample()``,
    ``start_rank()``, ``stop_rank()`` and ``lines()``.
    """

    def __init__(self, policy: Policy, node: str, *, meminfo: Path = MEMINFO,
                 kernel: KernelLogFollower | None = None, gpu: GpuSensor | None = None,
                 sysfs: Path = SYSFS_INFINIBAND) -> None:
        names = [n.name for n in policy.engine.nodes]
        if node not in names[1:]:
            raise ValueError(f"engine.nodes: no worker node {node!r} (worker nodes: "
                             f"{', '.join(names[1:]) or 'none'})")
        self.policy = policy
        self.rank_index = names.index(node)
        self.node = policy.engine.nodes[self.rank_index]
        self.state_dir = policy.state_directory / f"agent-{node}"
        self.rank = LocalRank(self.state_dir, kill_timeout_s=policy.engine.kill_timeout_seconds,
                              containers=rank_containers(policy, node))
        self.host = HostReader(meminfo)
        self.kernel, self.gpu, self.sysfs = kernel, gpu, sysfs
        self.kernel_lines: deque[tuple[float, str, str]] = deque(maxlen=KEEP_LINES)
        self.rank_lines: deque[str] = deque(maxlen=KEEP_LINES)
        self.rank_tags: deque[str] = deque(maxlen=20)
        self.latest: NodeSample | None = None
        self.gid: tuple[int | None, str | None] = (None, None)
        self._low: list[int] = []

    @property
    def floor_bytes(self) -> int:
        """The agent's own memory floor."""
        d = self.policy.engine.distributed
        return d.local_min_available_bytes if d.local_min_available_bytes is not None \
            else self.policy.guards.memory_floor.min_available_bytes

    async def start(self) -> None:
        """Open the kernel log and NVML (where present) and take a first sample."""
        if self.kernel is not None:
            logger.info("kernel log: %s", self.kernel.start())
        if self.gpu is not None:
            await asyncio.to_thread(self.gpu.start)
        await self.step()

    async def run(self, stop: asyncio.Event) -> None:
        """Sample and check the floor every ``sample_seconds`` until ``stop`` is set."""
        period = self.policy.engine.distributed.sample_seconds
        while not stop.is_set():
            began = time.monotonic()
            try:
                await self.step()
            except Exception:      # a sampling failure must never end the floor's watch
                logger.exception("sampling the node failed")
            await asyncio.sleep(max(0.0, period - (time.monotonic() - began)))

    async def step(self) -> NodeSample:
        """One sample; at the floor, SIGKILL the rank now."""
        sample = await self._read()
        self.latest = sample
        await self._floor(sample)
        return self.latest

    async def _floor(self, s: NodeSample) -> None:
        need = self.policy.engine.distributed.local_consecutive_samples
        if s.mem_available_bytes is None:
            return
        self._low = [*self._low, s.mem_available_bytes][-need:] \
            if s.mem_available_bytes < self.floor_bytes else []
        if len(self._low) == need and self.rank.alive:
            evidence = {"mem_available_bytes": list(self._low), "node": self.node.name,
                        "min_available_bytes": self.floor_bytes, "consecutive_samples": need,
                        "wall_s": s.wall_s}
            await self.rank.kill(reason="memory_floor", evidence=evidence)
            evidence["killed_wall_s"] = time.time()     # the group is gone (or survived)
            self._low = []
            self.latest = await self._read()

    async def _read(self) -> NodeSample:
        host = self.host.read()
        fields: dict[str, Any] = {
            "name": self.node.name, "address": self.node.address, "wall_s": time.time(),
            **{k: host.get(k) for k in ("mem_total_bytes", "mem_available_bytes",
                                        "psi_memory_some_avg10_ratio",
                                        "psi_memory_full_avg10_ratio")}}
        fields["kernel_events"] = self._kernel_events()
        fields.update(await self._gpu())
        fields.update(self._rank_fields())
        return NodeSample(**fields)

    def _kernel_events(self) -> tuple[str, ...] | None:
        if self.kernel is None:
            return None
        now = time.monotonic()
        for event in self.kernel.poll():
            self.kernel_lines.append((now, kernel_event_tag(event), event.message))
        return tuple(tag for t, tag, _ in self.kernel_lines if now - t <= EVENT_WINDOW_SECONDS)

    async def _gpu(self) -> dict[str, Any]:
        if self.gpu is None or not self.gpu.available:
            return {}
        pids = (self.rank.pid,) if self.rank.alive and self.rank.pid else ()
        reading = await asyncio.to_thread(self.gpu.read, pids)
        return {"gpu_temperature_c": reading.gpu_temperature_c,
                "gpu_power_w": reading.gpu_power_w, "gpu_xid_events": reading.gpu_xid_events}

    def _rank_fields(self) -> dict[str, Any]:
        r = self.rank
        if r.log_tail is not None:
            for line in r.log_tail.poll():
                self.rank_lines.append(line)
                self.rank_tags.extend(classify_engine_line(line))
        rss = read_process_tree(r.pid).rss_bytes if r.alive and r.pid else None
        return {"rank_state": r.state if r.run_id else None, "rank_run_id": r.run_id,
                "rank_pid": r.pid, "rank_exit_code": r.exit_code,
                "rank_exit_signal": r.exit_signal, "rank_killed_reason": r.killed_reason,
                "rank_kill_evidence": r.kill_evidence, "rank_rss_bytes": rss,
                "rank_leftover_pids": r.leftovers(),
                "mem_available_before_launch_bytes": r.mem_available_before_bytes,
                "rank_log_tags": tuple(self.rank_tags), "gid_index": self.gid[0],
                "gid_note": self.gid[1]}

    async def start_rank(self, *, mode: str, run_id: str,
                         start_args: tuple[tuple[str, Any], ...] = ()) -> dict[str, Any]:
        """Start this node's rank in ``mode`` for the head's run ``run_id``; returns the
        pid, argv and the GID resolution. Raises KeyError (unknown mode),
        EngineStartError (a rank runs, or the spawn failed)."""
        policy = self.policy
        rung = policy.mode_index(mode)
        argv = rank_argv(policy, policy.modes[rung], self.rank_index, start_args)
        node_env, gid = node_environment(policy, self.rank_index, sysfs=self.sysfs)
        self.gid = (None, None) if gid is None else (gid.index, gid.note)
        tmp = make_run_tmp_dir(policy, run_id)
        env = engine_environment(policy, tmp, node_env=node_env)
        self.rank_tags.clear()
        before = self.host.read().get("mem_available_bytes")
        rank_run = run_id if self.rank.containers is None else f"{run_id}.{self.node.name}"
        pid = await self.rank.start(argv, env, cwd=policy.working_directory, run_id=rank_run,
                                    mem_available_bytes=int(before) if before else None)
        self.latest = await self._read()
        return {"pid": pid, "argv": argv, "gid_index": self.gid[0], "gid_note": self.gid[1]}

    async def stop_rank(self, *, reason: str, kill: bool) -> dict[str, Any]:
        """Stop (or, with ``kill``, SIGKILL) the rank and report what is left and the
        node's memory now."""
        eng = self.policy.engine
        if kill:
            survivors = await self.rank.kill(reason=reason)
        else:
            survivors = await self.rank.stop(
                grace_s=eng.shutdown_timeout_seconds + eng.stop_grace_seconds, reason=reason)
        self.latest = await self._read()
        return {"survivors": survivors, "mem_available_bytes": self.latest.mem_available_bytes,
                "mem_available_before_launch_bytes": self.rank.mem_available_before_bytes}

    def lines(self, limit: int) -> dict[str, list[str]]:
        """The last ``limit`` kernel lines and rank log lines."""
        return {"kernel": [m for _, _, m in list(self.kernel_lines)[-limit:]],
                "rank": list(self.rank_lines)[-limit:]}

    async def close(self) -> None:
        """Kill the rank, close the kernel log and NVML."""
        await self.rank.close()
        if self.kernel is not None:
            self.kernel.close()
        if self.gpu is not None:
            self.gpu.close()


def rank_containers(policy: Policy, node: str) -> ContainerEngine | None:
    """The container engine a worker node's rank runs in (``engine.runtime: container``),
    its containers labelled with the node's name as their host; None for a process rank."""
    spec = policy.engine.container
    if policy.engine.runtime != "container" or spec is None:
        return None
    return ContainerEngine(spec, fleet=policy.fleet, host=node,
                           working_directory=policy.working_directory)

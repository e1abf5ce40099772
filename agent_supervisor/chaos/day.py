"""``supervisor bench --day``: a compressed day of agent work under faults, three arms.

The same agents (``agent_supervisor.load.fleet``, tasks of a few turns) and the same faults at
the same offsets (``day_schedule``) run against, one after the other:

- **always-fast**: the top rung under a plain restart loop (systemd ``Restart=always``),
  agents straight at the engine;
- **always-safe**: the bottom rung under the same loop;
- **supervised**: ``supervisor run`` on the whole ladder, agents through its gateway.

Each arm's day starts when its first engine is ready. Engines run the real CPU vLLM
through ``spec_crash_engine.py`` (the speculative crash after the fault's offset). The
figures (``day_report``) are printed as a table and written as JSON with the supervised
arm's incidents and transitions. Exit status: 0; 1 when the supervised arm failed a task
while the box survived (no reboot-required incident); 3 when a process of the run was
left behind (checked with psutil after every arm).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from agent_supervisor.chaos.day_arms import RestartLoop, Supervised, own_processes, write_policy
from agent_supervisor.chaos.day_faults import Injector, Load
from agent_supervisor.chaos.day_report import ARMS, ArmResult, acceptance, arm_figures, format_table
from agent_supervisor.chaos.day_schedule import DAY_LADDER, Day, base_dir, full_day, short_day
from agent_supervisor.chaos.harness import GiB, Rig, chaos_policy

__all__ = ["main_day", "run_day"]

WRAPPER = Path(__file__).with_name("spec_crash_engine.py")
EXIT_LOST_TASK, EXIT_LEFTOVERS = 1, 3
REBOOT_KINDS = ("gpu_lost", "gpu_wedged", "memory_pinned")


def overrides(day: Day, floor: int, armed: Path) -> dict[str, Any]:
    """The day's policy on top of the chaos suite's (its engine, ports, hang window)."""
    return {
        "fleet": "chaos",
        "engine": {"args": [str(WRAPPER), "-m", "vllm.entrypoints.openai.api_server",
                            "--model", ".demo-models/target", "--served-model-name",
                            "tiny-agent", "--enforce-eager", "--max-model-len", "1024"],
                   "environment": {"VLLM_CPU_KVCACHE_SPACE": "1",
                                   "DAY_SPEC_CRASH_FILE": str(armed)}},
        "modes": DAY_LADDER,
        "restart": {"start_limit_burst": 3, "start_limit_interval_seconds": 600,
                    "restart_delay_seconds": 0, "restart_delay_max_seconds": 10},
        "guards": {"memory_floor": {"min_available_bytes": floor}},
        "hysteresis": {"calm_seconds": day.calm_seconds, "cooldown_seconds": 20,
                       "probation_seconds": 60, "max_transitions_per_hour": 60},
    }


def _make_arm(name: str, state: Path, ov: dict[str, Any]) -> RestartLoop | Supervised:
    if name == "supervised":
        return Supervised(Rig(state, **ov))
    policy = write_policy(state, chaos_policy(state, **ov))
    return RestartLoop(policy, 0 if name == "always-fast" else len(policy.modes) - 1, state)


def run_arm(name: str, day: Day, base: Path, floor: int,
            emit: Callable[[str], None]) -> tuple[ArmResult, list[str]]:
    """One arm's day. Returns its result and the processes it left (should be none)."""
    state = base / name
    state.mkdir(parents=True, exist_ok=True)
    armed = state / "spec-crash.armed"
    arm = _make_arm(name, state, overrides(day, floor, armed))
    ports = {_port(arm)}
    load = inj = None
    try:
        arm.start()
        arm.wait_ready(300)
        t0 = time.time()
        res = ArmResult(name, t0, t0 - time.monotonic(), [], [], [], [], [])
        emit(f"[{name}] day starts {time.strftime('%H:%M:%S', time.gmtime(t0))} UTC "
             f"({day.seconds:g} s)")
        load = Load(arm.base_url, day)
        res.records, res.tasks = load.records, load.tasks
        load.start()
        inj = Injector(arm, day, load=load, floor_bytes=floor, spec_crash_file=armed)
        inj.run(t0, t0 + day.seconds)
        drained = load.stop(day.request_timeout_seconds + 30)
        res.intervals, res.hangs, res.events = arm.intervals(time.time()), inj.hangs, inj.events
        res.summary = {**arm.summary(), "drained": drained}
    finally:
        if load is not None:
            load.stop(5)
        if inj is not None:
            inj.close()
        arm.close()
    time.sleep(1)
    left = own_processes(state, ports)
    emit(f"[{name}] done: {len(res.records)} requests, {len(res.tasks)} tasks; "
         f"processes left: {len(left)}")
    return res, left


def _port(arm: RestartLoop | Supervised) -> int:
    return arm.policy.engine.port if isinstance(arm, RestartLoop) else \
        arm.rig.data["engine"]["port"]


def run_day(day: Day, base: Path | None = None, *, arms: tuple[str, ...] = ARMS,
            emit: Callable[[str], None] = print) -> tuple[dict[str, Any], int]:
    """Run ``arms`` of ``day`` one after the other; returns the report and exit status."""
    os.environ.setdefault("SUPERVISOR_ADMIN_TOKEN", secrets.token_hex(8))
    base = base_dir(base)
    floor = int(max(2 * GiB, psutil.virtual_memory().available / 4))
    emit(f"day {day.name!r} seed {day.seed}: {day.seconds:g} s per arm, "
         f"{day.sessions} agents, tasks of {day.task_turns} turns; memory floor "
         f"{floor / GiB:.1f} GiB; in {base}")
    for line in day.describe():
        emit("  " + line)
    results: dict[str, ArmResult] = {}
    leftovers: dict[str, list[str]] = {}
    for name in arms:
        results[name], leftovers[name] = run_arm(name, day, base, floor, emit)
    figs = {n: arm_figures(r, day) for n, r in results.items()}
    report = _report(day, base, floor, results, figs, leftovers)
    status = _status(report, results)
    report["exit_status"] = status
    path = base / f"day-{day.name}-seed{day.seed}.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    report["json_path"] = str(path)
    return report, status


def _report(day: Day, base: Path, floor: int, results: dict[str, ArmResult],
            figs: dict[str, dict[str, Any]], leftovers: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "day": {"name": day.name, "seed": day.seed, "seconds": day.seconds,
                "sessions": day.sessions, "task_turns": day.task_turns,
                "faults": [dataclasses.asdict(f) for f in day.faults],
                "fault_free": day.fault_free(), "memory_floor_bytes": floor,
                "hang_operator_seconds": day.hang_operator_seconds},
        "ladder": [m["name"] for m in DAY_LADDER],
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                    "memory_bytes": psutil.virtual_memory().total},
        "arms": {n: {"figures": figs[n], "events": r.events, "hangs": r.hangs,
                     "summary": r.summary, "t0": r.t0} for n, r in results.items()},
        "acceptance": acceptance(figs) if set(ARMS) <= set(figs) else None,
        "leftover_processes": leftovers,
        "base": str(base),
    }


def _status(report: dict[str, Any], results: dict[str, ArmResult]) -> int:
    if any(report["leftover_processes"].values()):
        return EXIT_LEFTOVERS
    sup = report["arms"].get("supervised")
    if sup is None:
        return 0
    box_lost = any(i["kind"] in REBOOT_KINDS for i in sup["summary"].get("incidents", []))
    return EXIT_LOST_TASK if sup["figures"]["tasks_failed"] and not box_lost else 0


def print_report(report: dict[str, Any], emit: Callable[[str], None] = print) -> None:
    """The table, the acceptance targets, the supervised arm's incidents and transitions."""
    figs = {n: a["figures"] for n, a in report["arms"].items()}
    if set(ARMS) <= set(figs):
        emit("")
        emit(format_table(figs))
        emit("")
        for k, v in (report["acceptance"] or {}).items():
            emit(f"  {k}: {'yes' if v else 'NO' if v is False else '-'}")
    for name, arm in report["arms"].items():
        emit(f"\n{name}: faults " + ", ".join(
            f"{e['kind']}@{e.get('at_seconds', e.get('skipped'))}" for e in arm["events"])
            + f"; engine runs {arm['summary'].get('engine_runs')}; top errors "
            f"{arm['figures']['top_errors']}")
    sup = report["arms"].get("supervised", {}).get("summary", {})
    for kind in ("incidents", "transitions"):
        if sup.get(kind):
            emit(f"\nsupervised arm, {kind}:")
            for row in sup[kind]:
                emit("  " + " | ".join(str(v) for v in row.values())[:220])
    emit(f"\nJSON: {report.get('json_path')}; exit status {report['exit_status']}")


def main_day(*, short: bool = False, seed: int = 1, base: Path | None = None,
             arms: tuple[str, ...] = ARMS, emit: Callable[[str], None] = print) -> int:
    """``supervisor bench --day`` / ``benchmarks/day.py``: run, print, return the status."""
    day = short_day(seed) if short else full_day(seed)
    report, status = run_day(day, base, arms=arms, emit=emit)
    print_report(report, emit)
    return status

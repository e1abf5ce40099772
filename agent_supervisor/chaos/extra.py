"""Scenarios that need a supervisor life of their own (another policy, another store)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import yaml

from agent_supervisor.chaos.harness import Result, Rig

__all__ = ["database_away", "preemption_storm", "start_failure_loop"]

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
#: A storm going on under the shed, or back after its restore, steps down.
STORM_KINDS = ("preemption_storm", "preemption_storm_recurring")


def start_failure_loop(base: Path) -> Result:
    """A bad engine argument: no retry (issue 12), straight to the first rung without it,
    the flag named in the incident and in its log tail, the failed run's non-zero exit
    status on record."""
    res = Result("start-up failure (bad argument)",
                 notes="1 attempt, the flag named, then the first rung without it")
    rig = Rig(base / "startfail", restart={"start_limit_burst": 2,
                                            "restart_delay_seconds": 2,
                                            "restart_delay_max_seconds": 8})
    rig.data["modes"][0]["args"]["--no-such-flag"] = True
    rig.policy_path.write_text(yaml.safe_dump(rig.data, sort_keys=False))
    t0 = time.time()
    try:
        rig.start()
        run = rig.ready_run()
        runs = rig.runs()
        failed = [r for r in runs if r.outcome == "start_failed"]
        named = [i for i in rig.incidents() if i.kind == "engine_bad_argument"]
        res.action = "step_down"
        res.incident = "engine_bad_argument"
        res.detected_seconds = failed[0].ended_at.timestamp() - t0 if failed else None
        res.serving_again_seconds = run.ready_at.timestamp() - t0
        res.extra = {"attempts": len(failed), "serving_mode": run.mode,
                     "flag_named": bool(named) and "--no-such-flag" in named[0].explanation,
                     "log_tail_has_flag": bool(named)
                     and "--no-such-flag" in (named[0].log_tail or ""),
                     "exit_code": failed[0].exit_code if failed else None}
        res.ok = (len(failed) == 1 and run.mode == "plain4" and res.extra["flag_named"]
                  and res.extra["log_tail_has_flag"] and res.extra["exit_code"] not in (None, 0))
    finally:
        rig.close()
    return res


def preemption_storm(base: Path) -> Result:
    """A tiny KV cache in small blocks, many sessions, long answers: preemptions pile up;
    the guard sheds the gateway's limits, then (the storm going on 20 s later) steps down
    to fewer sequences.

    Three earlier tries with 90% long prompts (the CPU backend's 128-token blocks) made 16
    preemptions per ~80,000 tokens: a long prompt takes most of the cache, so few requests
    run at once and a running request rarely lacks a block. What thrashes is many running
    requests that all grow: 32-token blocks (``--block-size 32``, the smallest the CPU
    attention backend takes: "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])")
    make each one ask for a new block every 32 tokens, and vLLM's V1 scheduler preempts
    the newest running request (recompute) whenever one cannot get it
    (vllm/v1/core/sched/scheduler.py)."""
    res = Result("preemption storm (tiny KV cache)",
                 notes="--kv-cache-memory-bytes 6e5, --block-size 32, no prefix caching")
    rig = Rig(base / "storm", guards={"preemption_storm": {
        "preemptions_per_1k_tokens": 1.0, "min_preemptions": 5, "sustain_seconds": 20,
        "throughput_drop_ratio": 0.1}},
        hysteresis={"shed_seconds": 20, "cooldown_seconds": 30})
    rig.data["engine"]["environment"] = {}
    # ~1,150 tokens of KV (1e6 bytes held 1,920): one 1,024-token request fits, two do not.
    rig.data["modes"][0]["args"]["--kv-cache-memory-bytes"] = 600_000
    # Prefix caching softens preemption (a re-admitted request hits its own blocks): off,
    # so the tiny cache thrashes as the field reports describe.
    rig.data["modes"][0]["args"]["--no-enable-prefix-caching"] = True
    rig.data["modes"][0]["args"]["--block-size"] = 32
    rig.data["guards"]["engine_hung"]["stall_seconds"] = 120
    rig.policy_path.write_text(yaml.safe_dump(rig.data, sort_keys=False))
    try:
        rig.start()
        rig.ready_run()
        rig.start_fleet(sessions=2, max_tokens=128)
        time.sleep(45)                               # light load: the throughput to lose
        t0 = time.time()
        before = _engine_counters(rig)
        rig.start_fleet(sessions=24, max_tokens=384, long_prompt_probability=0.3)
        try:
            inc = rig.wait("preemption storm step down", lambda: next(
                (i for i in rig.incidents() if i.kind in STORM_KINDS
                 and i.action == "step_down"), None), timeout=200)
        except AssertionError:
            res.notes += "; no step down within 200 s (see the evidence in the trace)"
            res.extra["engine_counters"] = _storm_counters(before, _engine_counters(rig),
                                                           time.time() - t0)
            return res
        counters = _storm_counters(before, _engine_counters(rig), time.time() - t0)
        res.extra["shed_first"] = any(i.kind in STORM_KINDS and i.action == "shed"
                                      for i in rig.incidents())
        res.incident, res.action = inc.kind, inc.action
        res.detected_seconds = inc.started_at.timestamp() - t0
        run = rig.ready_run(after=inc.started_at.timestamp())
        res.serving_again_seconds = run.ready_at.timestamp() - t0
        res.extra = {"evidence": inc.findings[0]["evidence"], "new_mode": run.mode,
                     "shed_first": res.extra["shed_first"], "engine_counters": counters}
        res.requests_failed, res.requests_total = rig.failed_between(
            t0, run.ready_at.timestamp() + 3)
        res.ok = run.mode == "plain4"
    finally:
        rig.close()
    return res


def _engine_counters(rig: Rig) -> dict[str, float]:
    """vLLM's preemption and generation counters, read from the engine itself."""
    url = f"http://127.0.0.1:{rig.data['engine']['port']}/metrics"
    try:
        text = httpx.get(url, timeout=10).text
    except httpx.HTTPError:
        return {}
    out: dict[str, float] = {}
    for name in ("vllm:num_preemptions_total", "vllm:generation_tokens_total"):
        out[name] = sum(float(line.split()[-1]) for line in text.splitlines()
                        if line.startswith(name))
    return out


def _storm_counters(before: dict[str, float], after: dict[str, float],
                    seconds: float) -> dict[str, float]:
    """Preemptions and generated tokens over the storm, and preemptions per 1,000."""
    pre = after.get("vllm:num_preemptions_total", 0) - before.get("vllm:num_preemptions_total", 0)
    gen = after.get("vllm:generation_tokens_total", 0) - before.get(
        "vllm:generation_tokens_total", 0)
    return {"seconds": round(seconds, 1), "preemptions": pre, "generated_tokens": gen,
            "preemptions_per_1k_tokens": round(1000 * pre / gen, 2) if gen else None}


def database_away(base: Path) -> Result:
    """PostgreSQL stops mid-run; a crash then is spooled and replayed once it is back."""
    res = Result("database goes away (PostgreSQL stopped)",
                 notes="incident spooled during the outage, replayed once")
    rig = Rig(base / "dbaway", storage={"database_url": _isolated_pg(base)})
    version = subprocess.run(["ls", "/etc/postgresql"], capture_output=True,
                             text=True).stdout.split()[0]
    ctl = ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main"]
    try:
        rig.start()
        pid = rig.engine_pid()
        rig.ready_run()
        subprocess.run([*ctl, "stop"], check=True)
        t0 = time.time()
        try:
            os.kill(Rig.child(pid, "VLLM::EngineCore"), signal.SIGKILL)
            time.sleep(8)                            # the crash and restart, DB down
            m = re.search(r"^supervisor_store_spooled_records (\S+)$", rig.metrics(), re.M)
        finally:
            subprocess.run([*ctl, "start"], check=True)
        res.extra["spooled_during_outage"] = float(m.group(1)) if m else None
        inc = rig.wait("replayed incident", lambda: [
            i for i in rig.incidents() if i.kind in ("engine_core_died", "exited")], timeout=120)
        res.incident, res.action = inc[0].kind, inc[0].action
        res.detected_seconds = inc[0].started_at.timestamp() - t0
        res.extra["copies"] = len(inc)
        res.ok = len(inc) == 1 and bool(res.extra["spooled_during_outage"])
    finally:
        rig.close()
    return res


def _isolated_pg(base: Path) -> str:
    """A fresh schema of the test database for this run."""
    import uuid

    from sqlalchemy import create_engine, text

    schema = f"chaos_{uuid.uuid4().hex[:8]}"
    engine = create_engine(PG_URL)
    with engine.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    engine.dispose()
    return f"{PG_URL}?options=-csearch_path%3D{schema}"

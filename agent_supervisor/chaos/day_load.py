"""``supervisor bench --load-day``: a day without faults whose load and mix change (issue 32
item 3), the supervised arm against each fixed mode and the oracle.

Phases (``LoadPhase``): agents (1, 6, 2) and their mix: ``code`` (the fleet's coding
agents: tool results that carry the file back into the context, what n-gram speculation
copies from), ``long`` (most turns carry a long file excerpt). Arms, one after the other,
the same phases from each arm's first ready engine:

- **always-fast**: n-gram speculation k=5 (``DAY_LADDER``'s top) under a plain restart loop;
- **always-plain**: no speculation, the same loop;
- **supervised**: ``supervisor run`` on the day's ladder with ``top_rung.enabled``, its
  figures this box's (``LOAD_FIGURES``), agents through its gateway.

The report (``load_report``, pure): tokens/s per phase per arm (completion tokens of
the requests that ended in the phase), the oracle (the best fixed arm in each phase,
chosen in hindsight) and each arm's ratio to it, per phase and over the day (the
oracle's day: the sum of each phase's best fixed arm's tokens), and the supervised
arm's ratio to each fixed arm over the day, against the issue's targets (>= 0.95 of the
oracle, >= 1.1 of each fixed arm).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_supervisor.chaos.day_arms import RestartLoop, Supervised, own_processes, write_policy
from agent_supervisor.chaos.day_schedule import DAY_LADDER, base_dir
from agent_supervisor.chaos.harness import Rig, chaos_policy
from agent_supervisor.load.agents import RequestRecord
from agent_supervisor.load.fleet import Fleet

__all__ = ["FIXED", "LOAD_ARMS", "LOAD_FIGURES", "LoadPhase", "format_load_table",
           "full_load_day", "load_report", "main_load_day", "phase_tokens", "short_load_day"]

FIXED = ("always-fast", "always-plain")
LOAD_ARMS = (*FIXED, "supervised")
#: Long file excerpts of the ``long`` mix: about 530 tokens with the demo tokenizer
#: (``day_faults.LONG_PROMPT_TOKENS``), half the 1,024-token context.
LONG_PROMPT_TOKENS = 240

#: This box's CPU engine on the tiny Llama (docs/figures.md): ``supervisor calibrate
#: --concurrency 1,6`` gave n-gram k=5 287 against 144 tokens/s for one request and 68
#: against 100 per request at six. The day's agents are coding agents (one profile,
#: ``code``); the acceptance at position 0 is the CPU_ENGINE.md 99%; start times: ready
#: in 18-27 s with --enforce-eager (shared/CPU_ENGINE.md), 25 s taken.
LOAD_FIGURES: dict[str, Any] = {
    "tokens_per_second": {"fast": {"code": [[1, 287], [6, 68]]},
                          "nospec": {"code": [[1, 144], [6, 100]]}},
    "acceptance": {"fast": {"code": 0.99}},
    "start_seconds": {"fast": 25, "nospec": 25},
}


@dataclass(frozen=True, slots=True)
class LoadPhase:
    """``sessions`` agents with ``mix`` (``code`` or ``long``) for ``seconds``."""

    name: str
    seconds: float
    sessions: int
    mix: str


def full_load_day() -> tuple[LoadPhase, ...]:
    """The measured day: 1, 6, 2 agents; 420 s per arm (about 24 min for the three arms
    with their start-ups on this 2-core box)."""
    return (LoadPhase("1 agent, code", 120, 1, "code"),
            LoadPhase("6 agents, code", 180, 6, "code"),
            LoadPhase("2 agents, long prompts", 120, 2, "long"))


def short_load_day() -> tuple[LoadPhase, ...]:
    """The CI form: the same phases, 20 s each (no switch can pay in it: a smoke of the
    harness and the report)."""
    return tuple(LoadPhase(p.name, 20, p.sessions, p.mix) for p in full_load_day())


def load_policy_overrides(phases: tuple[LoadPhase, ...]) -> dict[str, Any]:
    """The load day's policy on top of the chaos suite's: the day's ladder, the top rung
    chosen by the traffic among fast and nospec with ``LOAD_FIGURES``."""
    short = sum(p.seconds for p in phases) < 120
    return {
        "fleet": "loadday",
        "engine": {"args": ["-m", "vllm.entrypoints.openai.api_server", "--model",
                            ".demo-models/target", "--served-model-name", "tiny-agent",
                            "--enforce-eager", "--max-model-len", "1024"],
                   "environment": {"VLLM_CPU_KVCACHE_SPACE": "1"}},
        "modes": DAY_LADDER,
        "hysteresis": {"calm_seconds": 30, "cooldown_seconds": 20, "probation_seconds": 60,
                       "max_transitions_per_hour": 60},
        # A switch drains the engine's requests (64 tokens each): any load is calm enough.
        "top_rung": {"enabled": True, "modes": ["fast", "nospec"], "figures": LOAD_FIGURES,
                     "sustain_seconds": 10 if short else 20, "margin_ratio": 0.1,
                     "max_switches_per_hour": 6, "calm_max_requests": 8},
    }


def phase_tokens(records: list[RequestRecord], phases: tuple[LoadPhase, ...],
                 starts: list[float]) -> list[dict[str, float]]:
    """Per phase: completion tokens of the successful requests that ended in it (from its
    start, monotonic seconds, for its ``seconds``), its requests and failures."""
    out = []
    for p, lo in zip(phases, starts, strict=True):
        ended = [r for r in records if lo <= r.started_s + r.duration_seconds < lo + p.seconds]
        out.append({"tokens": float(sum(r.completion_tokens for r in ended if r.ok)),
                    "requests": float(len(ended)),
                    "failed": float(sum(not r.ok for r in ended)), "seconds": p.seconds})
    return out


def load_report(per_arm: dict[str, list[dict[str, float]]],
                phases: tuple[LoadPhase, ...]) -> dict[str, Any]:
    """The figures (module doc) from each arm's ``phase_tokens``. Pure."""
    rows = []
    for i, p in enumerate(phases):
        rate = {a: per_arm[a][i]["tokens"] / p.seconds for a in per_arm}
        fixed = {a: rate[a] for a in FIXED if a in rate}
        best = max(fixed, key=lambda a: fixed[a]) if fixed else None
        oracle = fixed[best] if best else None
        rows.append({"phase": p.name, "tokens_per_second": rate, "oracle_arm": best,
                     "oracle_tokens_per_second": oracle,
                     "ratio_to_oracle": {a: _div(r, oracle) for a, r in rate.items()}})
    day = {a: sum(x["tokens"] for x in per_arm[a]) for a in per_arm}
    oracle_day = sum((r["oracle_tokens_per_second"] or 0.0) * p.seconds
                     for r, p in zip(rows, phases, strict=True))
    sup = day.get("supervised")
    ratios = {a: _div(day[a], oracle_day) for a in day}
    vs_fixed = {a: _div(sup, day[a]) for a in FIXED if a in day} if sup is not None else {}
    per_phase = [r["ratio_to_oracle"].get("supervised") for r in rows]
    return {"phases": rows, "day_tokens": day, "oracle_day_tokens": oracle_day,
            "day_ratio_to_oracle": ratios, "supervised_over_fixed": vs_fixed,
            "acceptance": None if sup is None else {
                "supervised_ge_0.95_oracle_each_phase": all(
                    r is not None and r >= 0.95 for r in per_phase),
                "supervised_ge_0.95_oracle_day": (ratios["supervised"] or 0) >= 0.95,
                "supervised_ge_1.1_each_fixed_day": bool(vs_fixed) and all(
                    v is not None and v >= 1.1 for v in vs_fixed.values())}}


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def format_load_table(report: dict[str, Any]) -> str:
    """tokens/s per phase and arm, the oracle, supervised/oracle; then the day's line."""
    arms = list(report["day_tokens"])
    head = f"{'phase':28s}" + "".join(f"{a:>14s}" for a in arms) + f"{'oracle':>14s}" \
        + f"{'sup/oracle':>11s}"
    out = [head, "-" * len(head)]
    for r in report["phases"]:
        sup = r["ratio_to_oracle"].get("supervised")
        out.append(f"{r['phase']:28s}" + "".join(
            f"{r['tokens_per_second'][a]:14.1f}" for a in arms)
            + f"{(r['oracle_tokens_per_second'] or 0):14.1f}"
            + f"{'-' if sup is None else f'{sup:.2f}':>11s}")
    out.append(f"{'day, tokens':28s}" + "".join(f"{report['day_tokens'][a]:14.0f}"
                                                for a in arms)
               + f"{report['oracle_day_tokens']:14.0f}"
               + f"{_fmt(report['day_ratio_to_oracle'].get('supervised')):>11s}")
    out.append("supervised over each fixed arm, day: " + ", ".join(
        f"{a} {_fmt(v)}" for a, v in report["supervised_over_fixed"].items()))
    return "\n".join(out)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _make_arm(name: str, state: Path, ov: dict[str, Any]) -> RestartLoop | Supervised:
    if name == "supervised":
        return Supervised(Rig(state, **ov))
    policy = write_policy(state, chaos_policy(state, **ov))
    return RestartLoop(policy, 0 if name == "always-fast" else 1, state)


def _run_phases(base_url: str, phases: tuple[LoadPhase, ...], seed: int,
                records: list[RequestRecord], starts: list[float]) -> None:
    """Each phase's agents for its seconds, one phase after the other (blocks); each
    phase's monotonic start appended to ``starts``."""
    async def main() -> None:
        for i, p in enumerate(phases):
            starts.append(time.monotonic())
            fleet = Fleet(base_url, "tiny-agent", sessions=p.sessions, max_tokens=64,
                          timeout_seconds=120, task_turns=4, seed=seed + i,
                          long_prompt_probability=0.9 if p.mix == "long" else 0.0,
                          long_prompt_tokens=LONG_PROMPT_TOKENS)
            fleet.records = records
            await fleet.run(p.seconds)
    asyncio.run(main())


def run_load_arm(name: str, phases: tuple[LoadPhase, ...], base: Path, seed: int,
                 emit: Callable[[str], None]) -> dict[str, Any]:
    """One arm's day: its figures per phase, summary and the processes it left."""
    state = base / name
    state.mkdir(parents=True, exist_ok=True)
    arm = _make_arm(name, state, load_policy_overrides(phases))
    records: list[RequestRecord] = []
    starts: list[float] = []
    try:
        arm.start()
        arm.wait_ready(300)
        emit(f"[{name}] day starts ({sum(p.seconds for p in phases):g} s)")
        thread = threading.Thread(target=_run_phases, args=(arm.base_url, phases, seed,
                                                            records, starts),
                                  daemon=True)
        thread.start()
        thread.join(sum(p.seconds for p in phases) + 180)
        summary = arm.summary()
    finally:
        arm.close()
    time.sleep(1)
    left = own_processes(state, set())
    emit(f"[{name}] done: {len(records)} requests; processes left: {len(left)}")
    starts += [starts[-1] if starts else time.monotonic()] * (len(phases) - len(starts))
    return {"phases": phase_tokens(records, phases, starts), "summary": summary, "left": left}


def main_load_day(*, short: bool = False, seed: int = 1, base: Path | None = None,
                  arms: tuple[str, ...] = LOAD_ARMS,
                  emit: Callable[[str], None] = print) -> int:
    """``supervisor bench --load-day``: run the arms, print the table, write the JSON.
    Exit status 0; 3 when a process of the run was left behind."""
    phases = short_load_day() if short else full_load_day()
    base = base_dir(base)
    emit("load day: " + "; ".join(f"{p.name} {p.seconds:g} s" for p in phases)
         + f"; in {base}")
    results = {a: run_load_arm(a, phases, base, seed, emit) for a in arms}
    report = load_report({a: r["phases"] for a, r in results.items()}, phases)
    report["arms"] = {a: {"summary": r["summary"], "left": r["left"]}
                      for a, r in results.items()}
    path = base / f"load-day-{'short' if short else 'full'}-seed{seed}.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    emit("")
    emit(format_load_table(report))
    for k, v in (report["acceptance"] or {}).items():
        emit(f"  {k}: {'yes' if v else 'NO'}")
    sup = results.get("supervised", {}).get("summary", {})
    for row in sup.get("transitions", []):
        emit("  transition: " + " | ".join(str(v) for v in row.values())[:220])
    emit(f"JSON: {path}")
    return 3 if any(r["left"] for r in results.values()) else 0

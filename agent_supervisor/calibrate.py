"""``supervisor calibrate``: run each rung briefly under a standard agent-like load and
store what it delivered, per concurrency: tokens/s per request and in total, time to
first token, acceptance per draft position, peak memory.

These baselines feed the speculative-decoding guard (is speculation paying for itself
here?), the launch-lottery check (acceptance by position per mode: ``load_acceptance``)
and tell the operator which rung is really fastest on their box.

With ``profiles`` (``agent_supervisor.load.profiles``: code, short chat, long-form, thinking)
each rung is also measured on each kind of work; ``propose_order`` then ranks the
speculative rungs for this fleet and returns the change as a diff of the policy's mode
order for the operator to apply (no single winner: DSpark beat MTP on code, MTP won long
essays on the same GB10 weights). The profile ``fleet`` is the fleet's own recent request
shapes, kept by the gateway where the operator opted in (``gateway.sample_request_shapes``;
lengths only, never text: agent_supervisor/load/fleet_shapes.py). Every profile's rows are
stored too (``profile`` column; the dashboard's calibration table), but only the standard
agent load's rows (profile None) are the baselines the guards read.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.errors import ScrapeError
from agent_supervisor.load.agents import AgentLoad, summarize
from agent_supervisor.load.fleet_shapes import FLEET, fetch_shapes, fleet_profile
from agent_supervisor.load.profiles import PROFILES, Profile
from agent_supervisor.policy import Policy
from agent_supervisor.record.baselines import args_digest
from agent_supervisor.record.store import Store
from agent_supervisor.sense.engine_metrics import parse_metrics
from agent_supervisor.sense.host import HostReader
from agent_supervisor.sense.probes import scrape_metrics, served_model
from agent_supervisor.sense.process_tree import read_process_tree
from agent_supervisor.sense.profiles import profile_for
from agent_supervisor.states import EngineState

__all__ = ["calibrate", "propose_order"]

logger = logging.getLogger(__name__)

#: Context the load keeps under, when the mode does not set --max-model-len.
DEFAULT_CONTEXT_TOKENS = 2048


async def _wait_ready(launcher: EngineLauncher) -> bool:
    while launcher.state is EngineState.STARTING:
        await asyncio.sleep(0.25)
    return launcher.state is EngineState.READY


async def _metrics(client: httpx.AsyncClient, base: str, kind: str) -> dict[str, Any]:
    """The engine's counters in Sample field names (its profile's metric table)."""
    profile = profile_for(kind)
    try:
        return parse_metrics(await scrape_metrics(client, base, 5.0), table=profile.metrics,
                             per_position=profile.per_position_metric)
    except ScrapeError:
        return {}


def _acceptance(before: dict[str, Any], after: dict[str, Any]) -> list[float] | None:
    key = "spec_decode_accepted_per_position_total"
    drafts = (after.get("spec_decode_num_drafts_total") or 0) - (
        before.get("spec_decode_num_drafts_total") or 0)
    if not after.get(key) or drafts <= 0:
        return None
    prior = before.get(key) or [0.0] * len(after[key])
    return [round((a - b) / drafts, 4) for a, b in zip(after[key], prior, strict=True)]


def _tpot_rate(before: dict[str, Any], after: dict[str, Any]) -> float | None:
    """Finished requests over the summed time per output token, between two scrapes."""
    def delta(key: str) -> float:
        return (after.get(key) or 0.0) - (before.get(key) or 0.0)
    n, total = delta("request_tpot_count_total"), delta("request_tpot_sum_seconds_total")
    return n / total if n > 0 and total > 0 else None


async def _measure(launcher: EngineLauncher, client: httpx.AsyncClient, model: str,
                   concurrency: int, seconds: float, context: int,
                   profile: Profile | None = None) -> dict[str, Any]:
    base = launcher.base_url
    host = HostReader()
    peak = {"rss": 0, "avail": None}
    done = asyncio.Event()

    async def watch() -> None:
        while not done.is_set():
            pid = launcher.run.pid if launcher.run else None
            if pid:
                peak["rss"] = max(peak["rss"], read_process_tree(pid).rss_bytes)
            avail = host.read()["mem_available_bytes"]
            if avail is not None:
                peak["avail"] = avail if peak["avail"] is None else min(peak["avail"], avail)
            await asyncio.sleep(0.5)

    before = await _metrics(client, base, launcher.policy.engine.kind)
    watcher = asyncio.create_task(watch())
    t0 = time.monotonic()
    records = await AgentLoad(base, model, concurrency, context_limit_tokens=context,
                              profile=profile).run(seconds)
    elapsed = time.monotonic() - t0
    done.set()
    await watcher
    after = await _metrics(client, base, launcher.policy.engine.kind)
    summary = summarize(records, elapsed)
    client_side = summary["tokens_per_second_per_request"]
    server_side = _tpot_rate(before, after)
    if server_side is not None:
        # The same measure the live guard reads: decode speed from the engine's own
        # time-per-output-token histogram (queueing and prefill excluded).
        summary["tokens_per_second_per_request"] = server_side
    return {**summary, "client_tokens_per_second_per_request": client_side,
            "seconds": elapsed,
            "acceptance_by_position": _acceptance(before, after),
            "peak_rss_bytes": peak["rss"] or None, "mem_available_min_bytes": peak["avail"]}


async def calibrate(policy: Policy, store: Store, *, modes: list[str] | None = None,
                    concurrency: tuple[int, ...] = (1, 4), seconds: float = 20.0,
                    profiles: tuple[str, ...] = (),
                    emit: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Measure each selected mode at each concurrency; store and return the rows.

    Each mode: start the engine, warm it up, run the load per concurrency, stop it.
    A mode whose engine does not become ready is reported and skipped. ``profiles``:
    measure each mode on these workload profiles too (rows carry ``profile`` and are
    stored with it; the guards read only the agent load's). Raises KeyError for a mode
    or profile name that does not exist.
    """
    for name in profiles:
        if name not in PROFILES and name != FLEET:
            raise KeyError(name)
    # Opt-in (gateway.sample_request_shapes): the fleet's own shapes, read before any
    # engine of ours takes the port. ValueError names the setting when they are missing.
    shapes = fetch_shapes(policy) if FLEET in profiles else []
    selected = [policy.mode_index(m) for m in modes] if modes else range(len(policy.modes))
    rows: list[dict[str, Any]] = []
    launcher = EngineLauncher(policy)
    emit(f"{'mode':12s} {'conc':>4s} {'tok/s/req':>9s} {'tok/s':>7s} {'ttft p50':>8s} "
         f"{'req':>4s} {'fail':>4s} acceptance by position")
    async with httpx.AsyncClient() as client:
        for rung in selected:
            await launcher.start(rung=rung)
            try:
                await _calibrate_mode(launcher, client, policy, store, rung, concurrency,
                                      seconds, rows, emit, profiles, shapes)
            finally:
                await launcher.stop(reason="calibration of this mode done")
    await launcher.close()
    if profiles:
        emit(propose_order(rows, policy) or "the speculative rungs are already in the best "
             "order for these profiles (or fewer than two were measured)")
    return rows


def _tokens(value: object) -> int:
    """--max-model-len as vLLM reads it: an integer or "32k"/"1m" (powers of 1000)."""
    text = str(value).strip().lower()
    scale = {"k": 1000, "m": 1000**2}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def _context_tokens(policy: Policy, rung: int) -> int:
    """The context one request may use at ``rung``: vLLM's ``--max-model-len``;
    llama-server's ``--ctx-size`` shared by its ``--parallel`` slots (tools/server: each
    slot gets n_ctx / n_parallel)."""
    args = policy.modes[rung].args
    if policy.engine.kind == "llama_cpp":
        slots = policy.max_num_seqs(rung) or 1
        return int(args.get("--ctx-size") or DEFAULT_CONTEXT_TOKENS * slots) // slots
    return _tokens(args.get("--max-model-len") or DEFAULT_CONTEXT_TOKENS)


async def _calibrate_mode(launcher: EngineLauncher, client: httpx.AsyncClient, policy: Policy,
                          store: Store, rung: int, concurrency: tuple[int, ...], seconds: float,
                          rows: list[dict[str, Any]], emit: Callable[[str], None],
                          profiles: tuple[str, ...] = (),
                          shapes: list[dict[str, Any]] | None = None) -> None:
    mode = policy.modes[rung]
    if not await _wait_ready(launcher):
        emit(f"{mode.name:12s} did not become ready: skipped")
        return
    model = await served_model(client, launcher.base_url, 5.0) or "default"
    context = _context_tokens(policy, rung)
    await AgentLoad(launcher.base_url, model, 1, context_limit_tokens=context).run(3.0)
    for conc in concurrency:
        m = await _measure(launcher, client, model, conc, seconds, context)
        row = {"mode": mode.name, "concurrency": conc, **m}
        rows.append(row)
        ttft = m["ttft_seconds_p50"]
        emit(f"{mode.name:12s} {conc:4d} {m['tokens_per_second_per_request']:9.1f} "
             f"{m['tokens_per_second_total']:7.1f} "
             f"{'-' if ttft is None else f'{ttft:.3f}':>8s} {m['requests']:4d} "
             f"{m['failed']:4d} {m['acceptance_by_position'] or '-'}")
        await _store(store, policy, rung, conc, m, None)
    for name in profiles:
        work = fleet_profile(shapes or [], context) if name == FLEET else PROFILES[name]
        for conc in concurrency:
            m = await _measure(launcher, client, model, conc, seconds, context, work)
            rows.append({"mode": mode.name, "concurrency": conc, "profile": name, **m})
            await _store(store, policy, rung, conc, m, name)
            emit(f"{mode.name:12s} {conc:4d} {m['tokens_per_second_per_request']:9.1f} "
                 f"{m['tokens_per_second_total']:7.1f} profile {name} "
                 f"{m['acceptance_by_position'] or '-'}")


async def _store(store: Store, policy: Policy, rung: int, conc: int, m: dict[str, Any],
                 profile: str | None) -> None:
    """One measured row into mode_baselines (``profile`` None: the agent load the guards
    read; a profile's rows are for the operator's table and the proposed order)."""
    mode = policy.modes[rung]
    await asyncio.to_thread(
        store.add_baseline, mode=mode.name, args_digest=args_digest(policy, mode),
        concurrency=conc, measured_at=datetime.now(UTC),
        tokens_per_second_per_request=m["tokens_per_second_per_request"],
        tokens_per_second_total=m["tokens_per_second_total"],
        ttft_seconds=m["ttft_seconds_p50"], acceptance_by_position=m["acceptance_by_position"],
        peak_rss_bytes=m["peak_rss_bytes"], mem_available_min_bytes=m["mem_available_min_bytes"],
        seconds=m["seconds"], requests=m["requests"], profile=profile)


def propose_order(rows: list[dict[str, Any]], policy: Policy) -> str | None:
    """The speculative rungs ranked for this fleet, as a diff of the policy's mode order.

    Each profile's total tokens/s of a rung is taken relative to the best rung on that
    profile (summed over concurrency levels), and the rungs are ranked by the mean of
    those ratios over the profiles measured (each kind of work weighs the same). Only the
    speculative rungs move, among the places they already hold; the rest of the ladder
    stays. Returns the unified diff text, or None when the order is already the best or
    fewer than two speculative rungs were measured. Pure.
    """
    names = [m.name for m in policy.modes]
    spec = [m.name for m in policy.modes if m.speculative]
    totals: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.get("profile") and r["mode"] in spec:
            per = totals.setdefault(r["profile"], {})
            per[r["mode"]] = per.get(r["mode"], 0.0) + float(r["tokens_per_second_total"])
    measured = [m for m in spec if all(m in per for per in totals.values())] if totals else []
    if len(measured) < 2:
        return None
    score = {m: sum(per[m] / max(per.values()) for per in totals.values()) / len(totals)
             for m in measured}
    ranked = iter(sorted(measured, key=lambda m: -score[m]))
    proposed = [next(ranked) if n in measured else n for n in names]
    if proposed == names:
        return None
    lines = [f"  - name: {n}\n" for n in names]
    new = [f"  - name: {n}   # score {score[n]:.2f}\n" if n in score else f"  - name: {n}\n"
           for n in proposed]
    return "".join(difflib.unified_diff(lines, new, "modes (now)", "modes (proposed)"))

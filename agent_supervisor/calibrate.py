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
With ``--draft-lengths`` (issue 32) one speculative vLLM mode is measured with each draft
length K (K=0: without speculation) at each concurrency; ``propose_k_schedule`` turns that
into vLLM's draft length by batch size (``num_speculative_tokens_per_batch_size`` in
``--speculative-config``, vllm PR #32374: n-gram k=5 gave 287 against 144 tokens/s for one
request on this box and 68 against 100 per request at six, docs/figures.md), says what it should
gain over the mode's fixed K at each load, then runs the proposal at the same loads and
prints what it measured against the fixed K of the same run (ratios). The proposal is
measured, not only predicted: a schedule can do worse than either K alone where the batch
crosses a range's edge (MTP k=2 up to 4 requests, k 0 above: 8 requests fell from 232 to
24-157 tokens/s in total, vllm issue #49548). Those rows are printed, not stored: the
variants are not rungs of the policy.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.errors import ScrapeError
from agent_supervisor.load.agents import AgentLoad, summarize
from agent_supervisor.load.fleet_shapes import FLEET, fetch_shapes, fleet_profile
from agent_supervisor.load.profiles import PROFILES, Profile
from agent_supervisor.policy import Mode, Policy
from agent_supervisor.policy.speculative import check_k_schedule
from agent_supervisor.record.baselines import args_digest
from agent_supervisor.record.store import Store
from agent_supervisor.sense.engine_metrics import parse_metrics
from agent_supervisor.sense.host import HostReader
from agent_supervisor.sense.probes import scrape_metrics, served_model
from agent_supervisor.sense.process_tree import read_process_tree
from agent_supervisor.sense.profiles import profile_for
from agent_supervisor.states import EngineState

__all__ = ["KProposal", "calibrate", "calibrate_draft_lengths", "k_variants", "proposal_verdict",
           "propose_k_schedule", "propose_order"]

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


#: A measured ratio of the proposal to the fixed K within this of 1 is no change (runs of a
#: few seconds on a shared CPU box differ by a few per cent).
VERDICT_SLACK = 0.05
#: A K whose tokens/s per request is within this fraction of the best is as good: the
#: smaller K is kept (less verification work for the same speed; CPU runs of a few
#: seconds differ by a few per cent from one to the next).
TIE_RATIO = 0.03


@dataclass(frozen=True)
class KProposal:
    """A draft length per batch size and what it should gain.

    ``best_k``: concurrency -> the K measured fastest there. ``schedule``: vLLM's
    ``[[range_start, range_end, k], ...]`` (inclusive batch sizes, from 1), None when one
    K wins at every load (no schedule needed). ``fixed_k``: the mode's own K.
    ``predicted_gain``: concurrency -> tokens/s per request of the best K over the fixed K
    (a ratio, from the sweep).
    """

    best_k: dict[int, int]
    schedule: list[list[int]] | None
    fixed_k: int
    predicted_gain: dict[int, float]

    @property
    def max_k(self) -> int:
        """``num_speculative_tokens`` the proposal needs (vLLM sizes buffers by it)."""
        return max(self.best_k.values())


def propose_k_schedule(rows: Sequence[dict[str, Any]], fixed_k: int,
                       max_batch: int | None = None) -> KProposal:
    """The best K at each measured concurrency, as vLLM's batch-size schedule. Pure.

    ``rows``: ``{"k", "concurrency", "tokens_per_second_per_request"}`` (tokens/s, one per
    K and concurrency; every K at every concurrency). Ranges split half-way between two
    measured concurrencies (1, 2, 4, 6 -> 1, 2-3, 4-5, 6-``max_batch``), equal
    neighbours merged; the last range ends at ``max_batch`` (``--max-num-seqs``) or the
    highest concurrency measured (vLLM keeps the last k beyond it either way).
    Raises ValueError when a K or concurrency is missing, ``fixed_k`` was not measured or
    a rate is not positive.
    """
    table: dict[tuple[int, int], float] = {}
    for r in rows:
        table[(int(r["k"]), int(r["concurrency"]))] = float(r["tokens_per_second_per_request"])
    ks = sorted({k for k, _ in table})
    levels = sorted({c for _, c in table})
    missing = [(k, c) for k in ks for c in levels if (k, c) not in table]
    if missing or fixed_k not in ks or not levels:
        raise ValueError(f"the sweep needs every K at every concurrency, the fixed K "
                         f"{fixed_k} among them; missing (K, concurrency): {missing}")
    if any(v <= 0 for v in table.values()):
        raise ValueError("a K served no tokens at some concurrency: no proposal")
    best: dict[int, int] = {}
    for c in levels:
        top = max(table[(k, c)] for k in ks)
        best[c] = min(k for k in ks if table[(k, c)] >= top * (1 - TIE_RATIO))
    gain = {c: table[(best[c], c)] / table[(fixed_k, c)] for c in levels}
    if len(set(best.values())) == 1:
        return KProposal(best, None, fixed_k, gain)
    last = max(max_batch or levels[-1], levels[-1])
    ranges: list[list[int]] = []
    for i, c in enumerate(levels):
        start = 1 if i == 0 else (levels[i - 1] + c) // 2 + 1
        end = last if i == len(levels) - 1 else (c + levels[i + 1]) // 2
        if ranges and ranges[-1][2] == best[c]:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, best[c]])
    check_k_schedule(ranges, max(best.values()))
    return KProposal(best, ranges, fixed_k, gain)


def k_variants(policy: Policy, mode_name: str, ks: Sequence[int],
               schedule: KProposal | None = None) -> Policy:
    """A policy whose ladder is ``mode_name`` at each K (named ``<mode>-k<K>``; K=0 without
    ``--speculative-config``), or with ``schedule``: that mode with the proposed schedule
    (named ``<mode>-by-batch``). Raises KeyError for an unknown mode, ValueError for a mode
    that is not speculative vLLM."""
    mode = policy.modes[policy.mode_index(mode_name)]
    spec = mode.args.get("--speculative-config")
    if policy.engine.kind != "vllm" or not isinstance(spec, dict):
        raise ValueError(f"--draft-lengths needs a vLLM mode with --speculative-config; "
                         f"{mode_name} has none (llama-server has no draft length by batch "
                         "size: compare its --spec-draft-n-max values as separate modes)")
    base = {k: v for k, v in spec.items() if k != "num_speculative_tokens_per_batch_size"}

    def variant(name: str, new_spec: dict[str, Any] | None) -> Mode:
        args = {f: v for f, v in mode.args.items() if f != "--speculative-config"}
        if new_spec is not None:
            args = {"--speculative-config": new_spec, **args}
        return mode.model_copy(update={"name": name, "args": args})

    if schedule is not None and schedule.schedule is not None:
        modes = [variant(f"{mode_name}-by-batch", {
            **base, "num_speculative_tokens": schedule.max_k,
            "num_speculative_tokens_per_batch_size": schedule.schedule})]
    else:
        modes = [variant(f"{mode_name}-k{k}",
                         None if k == 0 else {**base, "num_speculative_tokens": k})
                 for k in ks]
    return policy.model_copy(update={"modes": modes, "initial_mode": None})


async def _sweep(policy: Policy, concurrency: Sequence[int], seconds: float,
                 emit: Callable[[str], None]) -> list[dict[str, Any]] | None:
    """Each mode of ``policy`` at each concurrency: ``{"mode", "concurrency",
    "tokens_per_second_per_request", ...}`` rows, or None when an engine did not start."""
    rows: list[dict[str, Any]] = []
    launcher = EngineLauncher(policy)
    try:
        async with httpx.AsyncClient() as client:
            for rung, mode in enumerate(policy.modes):
                await launcher.start(rung=rung)
                try:
                    if not await _wait_ready(launcher):
                        emit(f"{mode.name}: the engine did not become ready")
                        return None
                    model = await served_model(client, launcher.base_url, 5.0) or "default"
                    context = _context_tokens(policy, rung)
                    await AgentLoad(launcher.base_url, model, 1,
                                    context_limit_tokens=context).run(2.0)
                    for conc in concurrency:
                        m = await _measure(launcher, client, model, conc, seconds, context)
                        rows.append({"mode": mode.name, "concurrency": conc, **m})
                        emit(f"  {mode.name:18s} {conc:4d} "
                             f"{m['tokens_per_second_per_request']:9.1f} tok/s/req "
                             f"{m['requests']:3d} req {m['failed']} failed "
                             f"acceptance {m['acceptance_by_position'] or '-'}")
                finally:
                    await launcher.stop(reason="draft-length calibration of this K done")
    finally:
        await launcher.close()
    return rows


async def calibrate_draft_lengths(policy: Policy, mode_name: str, ks: Sequence[int], *,
                                  concurrency: Sequence[int] = (1, 2, 4, 6),
                                  seconds: float = 8.0,
                                  emit: Callable[[str], None] = print) -> dict[str, Any]:
    """Sweep ``ks`` for ``mode_name`` at each concurrency, propose a schedule, run it.

    Returns ``{"rows", "proposal", "measured"}``: the sweep's rows (with ``k``), the
    ``KProposal`` (None when an engine did not start) and the proposal's own rows (empty
    when no schedule is needed). Raises KeyError/ValueError as ``k_variants``.
    """
    sweep = k_variants(policy, mode_name, ks)       # refuses a mode without a spec config
    spec = policy.modes[policy.mode_index(mode_name)].args["--speculative-config"]
    assert isinstance(spec, dict)
    fixed = int(spec["num_speculative_tokens"])
    ks = sorted({*ks, 0, fixed})
    sweep = k_variants(policy, mode_name, ks)
    emit(f"draft length by batch size for {mode_name} (K={fixed}): K in {ks} at "
         f"concurrency {list(concurrency)}, {seconds:g} s each")
    raw = await _sweep(sweep, concurrency, seconds, emit)
    if raw is None:
        return {"rows": [], "proposal": None, "measured": []}
    rows = [{**r, "k": ks[[m.name for m in sweep.modes].index(r["mode"])]} for r in raw]
    cap = policy.max_num_seqs(policy.mode_index(mode_name))
    proposal = propose_k_schedule(rows, fixed, cap)
    emit(_table(rows, ks, proposal))
    measured: list[dict[str, Any]] = []
    if proposal.schedule is None:
        k = next(iter(proposal.best_k.values()))
        emit(f"K={k} is fastest at every load measured: no schedule needed"
             + ("" if k == fixed else f" (the mode's K={fixed} is not: use K={k})"))
        return {"rows": rows, "proposal": proposal, "measured": measured}
    emit("proposed --speculative-config: " + json.dumps({
        **{k: v for k, v in spec.items() if k != "num_speculative_tokens_per_batch_size"},
        "num_speculative_tokens": proposal.max_k,
        "num_speculative_tokens_per_batch_size": proposal.schedule}, separators=(",", ":")))
    emit("the proposal, measured (same run):")
    measured = await _sweep(k_variants(policy, mode_name, ks, proposal), concurrency,
                            seconds, emit) or []
    fixed_rate = {r["concurrency"]: r["tokens_per_second_per_request"] for r in rows
                  if r["k"] == fixed}
    ratios = {r["concurrency"]: r["tokens_per_second_per_request"] / fixed_rate[r["concurrency"]]
              for r in measured if fixed_rate.get(r["concurrency"])}
    for c, ratio in ratios.items():
        emit(f"  at {c}: proposal {ratio:.2f}x the fixed K={fixed} "
             f"(predicted {proposal.predicted_gain[c]:.2f}x)")
    emit(proposal_verdict(ratios, fixed))
    return {"rows": rows, "proposal": proposal, "measured": measured}


def proposal_verdict(ratios: dict[int, float], fixed_k: int) -> str:
    """Whether to use the measured schedule: only if it is no worse than the fixed K at
    any load measured (below ``1 - VERDICT_SLACK`` counts as worse) and better at one.
    ``ratios``: concurrency -> proposal's tokens/s per request over the fixed K's, same
    run. Pure."""
    if not ratios:
        return "verdict: the proposal did not run; keep the fixed K"
    worse = sorted(c for c, r in ratios.items() if r < 1 - VERDICT_SLACK)
    better = sorted(c for c, r in ratios.items() if r > 1 + VERDICT_SLACK)
    if worse:
        return (f"verdict: keep the fixed K={fixed_k}: the schedule measured below it at "
                f"{', '.join(map(str, worse))} concurrent (a range edge can cost more than "
                "it saves: vllm #49548; or this box's noise: measure again with --seconds)")
    if not better:
        return f"verdict: no measured gain over the fixed K={fixed_k}; keep it"
    return (f"verdict: use the schedule: better at {', '.join(map(str, better))} concurrent, "
            "no worse elsewhere")


def _table(rows: list[dict[str, Any]], ks: Sequence[int], proposal: KProposal) -> str:
    """Tokens/s per request by concurrency and K, the best K and the predicted gain."""
    rate = {(r["k"], r["concurrency"]): r["tokens_per_second_per_request"] for r in rows}
    head = "conc " + "".join(f"{'K=' + str(k):>9s}" for k in ks) + \
        f"  best  gain over K={proposal.fixed_k} (predicted)"
    lines = [head]
    for c in sorted(proposal.best_k):
        lines.append(f"{c:4d} " + "".join(f"{rate[(k, c)]:9.1f}" for k in ks)
                     + f"  {proposal.best_k[c]:4d}  {proposal.predicted_gain[c]:.2f}x")
    return "\n".join(lines)

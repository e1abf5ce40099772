"""Calibrated per-mode baselines: from the store to what ``decide()`` reads."""

from __future__ import annotations

import hashlib
import json
import statistics

from agent_supervisor.decide.top_rung import TopRungFigures
from agent_supervisor.policy.model import Mode, Policy, build_argv
from agent_supervisor.record.store import Store
from agent_supervisor.telemetry.baselines import AcceptanceBaselines, Baselines, GoodRunFigures

__all__ = ["RUN_ROWS", "args_digest", "last_good_run", "load_acceptance", "load_baselines",
           "load_top_rung_figures"]

#: Good runs averaged for a mode's usual acceptance (the newest first).
RUN_ROWS = 3


def args_digest(policy: Policy, mode: Mode) -> str:
    """A short digest of everything the engine of ``mode`` is launched with (the whole
    argument vector, the model included, and the environment): a baseline measured with
    anything else is not this mode's baseline."""
    blob = json.dumps([build_argv(policy, mode), policy.engine.environment], sort_keys=True,
                      separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_baselines(store: Store, policy: Policy) -> Baselines:
    """mode name -> [(concurrency, tokens/s per request)] for the policy's current modes."""
    digests = {m.name: args_digest(policy, m) for m in policy.modes}
    out: dict[str, list[tuple[float, float]]] = {}
    for row in store.baselines():
        if digests.get(row.mode) == row.args_digest:
            out.setdefault(row.mode, []).append(
                (float(row.concurrency), row.tokens_per_second_per_request))
    return {m: sorted(v) for m, v in out.items()}


def load_acceptance(store: Store, policy: Policy) -> AcceptanceBaselines:
    """mode name -> usual acceptance by draft position, for the launch lottery: the mean
    over the mode's newest good runs (up to ``RUN_ROWS``, source ``run``: the fleet's own
    workload), else over its newest calibration rows (every concurrency); only rows
    measured with the current arguments. Modes without speculation, or never measured,
    are absent."""
    digests = {m.name: args_digest(policy, m) for m in policy.modes}
    rows: dict[str, list[list[float]]] = {}
    for source in (store.run_baselines(per_mode=RUN_ROWS), store.baselines()):
        found: dict[str, list[list[float]]] = {}
        for row in source:
            pos = row.acceptance_by_position
            if digests.get(row.mode) == row.args_digest and pos and row.mode not in rows:
                found.setdefault(row.mode, []).append([float(a) for a in pos])
        rows.update(found)
    out: dict[str, tuple[float, ...]] = {}
    for mode, measured in rows.items():
        k = len(measured[0])
        same = [r for r in measured if len(r) == k]
        out[mode] = tuple(round(sum(r[i] for r in same) / len(same), 4) for i in range(k))
    return out


def load_top_rung_figures(store: Store, policy: Policy) -> TopRungFigures:
    """What the top-rung choice reads (``decide.top_rung``, issue 32), for the policy's
    current modes: tokens/s per request by concurrency per workload profile and the
    acceptance at draft position 0 per profile (mean over the concurrencies measured) from
    ``supervisor calibrate --profiles`` (rows measured with the current arguments only),
    and each mode's start time: the median of its recorded launch-to-ready seconds on
    this host. A mode never measured is absent from each."""
    digests = {m.name: args_digest(policy, m) for m in policy.modes}
    rates: dict[str, dict[str, list[tuple[float, float]]]] = {}
    first: dict[str, dict[str, list[float]]] = {}
    for row in store.profile_baselines():
        if row.profile is None or digests.get(row.mode) != row.args_digest:
            continue
        rates.setdefault(row.mode, {}).setdefault(row.profile, []).append(
            (float(row.concurrency), row.tokens_per_second_per_request))
        if row.acceptance_by_position:
            first.setdefault(row.mode, {}).setdefault(row.profile, []).append(
                float(row.acceptance_by_position[0]))
    starts: dict[str, list[float]] = {}
    for mode, seconds in store.start_durations():
        if mode in digests:
            starts.setdefault(mode, []).append(seconds)
    return TopRungFigures(
        tokens_per_second={m: {p: sorted(v) for p, v in per.items()}
                           for m, per in rates.items()},
        acceptance={m: {p: sum(v) / len(v) for p, v in per.items()}
                    for m, per in first.items()},
        start_seconds={m: statistics.median(v) for m, v in starts.items()})


def last_good_run(store: Store, policy: Policy, mode: Mode) -> GoodRunFigures | None:
    """The newest good run of ``mode`` (source ``run``, the current arguments) whose engine
    version is known, as ``GoodRunFigures``; None when there is none (issue 29: the
    ``engine_update`` guard compares a run on a new version with it)."""
    digest = args_digest(policy, mode)
    for row in store.run_baselines(per_mode=RUN_ROWS):
        if row.mode != mode.name or row.args_digest != digest or not row.engine_version:
            continue
        rate = row.tokens_per_second_per_request
        return GoodRunFigures(
            version=row.engine_version,
            acceptance_by_position=tuple(float(a) for a in row.acceptance_by_position or ()),
            tokens_per_second_per_request=rate if rate > 0 else None,
            concurrency=float(row.concurrency), measured_at=row.measured_at.isoformat())
    return None

"""GET /api/calibration: what ``supervisor calibrate --profiles`` measured, per rung and
workload profile (issue 13: no single speculation wins every kind of work)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter

from agent_supervisor.record.baselines import args_digest
from agent_supervisor.show.api.deps import ReadAccess, SupervisorDep

router = APIRouter(prefix="/api/calibration", tags=["calibration"],
                   dependencies=[ReadAccess])


def _rows(sup: SupervisorDep) -> list[dict[str, Any]]:
    policy = sup.policy
    digests = {m.name: args_digest(policy, m) for m in policy.modes}
    order = {m.name: i for i, m in enumerate(policy.modes)}
    out = [{"mode": r.mode, "rung": order.get(r.mode), "profile": r.profile,
            "concurrency": r.concurrency,
            "tokens_per_second_per_request": round(r.tokens_per_second_per_request, 2),
            "tokens_per_second_total": round(r.tokens_per_second_total, 2),
            "ttft_seconds": r.ttft_seconds, "acceptance_by_position": r.acceptance_by_position,
            "measured_at": r.measured_at.isoformat(),
            "current": digests.get(r.mode) == r.args_digest}
           for r in sup.store.profile_baselines()]
    return sorted(out, key=lambda r: (r["profile"] or "", r["concurrency"],
                                      r["rung"] if r["rung"] is not None else 99))


@router.get("")
async def calibration(sup: SupervisorDep) -> dict[str, Any]:
    """Rows per (mode, profile, concurrency), newest measurement each: tokens/s per
    request and in total, time to first token, acceptance by position; ``current`` is
    False for a row measured with other engine arguments than the policy's now. Per
    profile, ``best`` names the rung with the most total tokens/s (current rows only)."""
    rows = await asyncio.to_thread(_rows, sup)
    totals: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["current"]:
            per = totals.setdefault(r["profile"], {})
            per[r["mode"]] = per.get(r["mode"], 0.0) + r["tokens_per_second_total"]
    best = {p: max(v, key=lambda m: v[m]) for p, v in totals.items() if v}
    return {"rows": rows, "best": best}

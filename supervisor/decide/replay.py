"""Replay: run ``decide()`` over a recorded trace exactly as the live service did. Pure.

The same window, the same ladder arithmetic and the same ``decide`` as live; decisions
are taken where the live service took them (after each sample, unless the trace says it
skipped one) and operator levers are applied where they were pulled.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from supervisor.decide.decide import decide
from supervisor.decide.decision import Decision
from supervisor.decide.ladder import LadderState, advance, apply_operator
from supervisor.policy import Policy
from supervisor.telemetry.baselines import Baselines
from supervisor.telemetry.sample import Sample
from supervisor.telemetry.window import Window

__all__ = ["ReplayStep", "replay"]


@dataclass(frozen=True)
class ReplayStep:
    """One decision of the replay, next to the one recorded live (if the trace has it)."""

    t_s: float
    decision: Decision
    recorded: dict[str, Any] | None

    @property
    def matches(self) -> bool | None:
        """Same action, rung and explanation as live; None when nothing was recorded."""
        if self.recorded is None:
            return None
        d = self.decision
        return (self.recorded.get("action"), self.recorded.get("rung"),
                self.recorded.get("explanation")) == (str(d.action), d.rung, d.explanation)


def _baselines(header: dict[str, Any]) -> Baselines:
    return {m: [tuple(b) for b in v] for m, v in (header.get("baselines") or {}).items()}


def replay(records: Iterable[dict[str, Any]], policy: Policy,
           baselines: Baselines | None = None) -> list[ReplayStep]:
    """Decisions for every sample of ``records`` (see ``supervisor.record.trace``)."""
    recs = list(records)
    header = next((r for r in recs if r["type"] == "header"), {})
    base = baselines if baselines is not None else _baselines(header)
    live = any(r["type"] in ("decision", "skip") for r in recs)
    window = Window(policy.sampling.window_seconds)
    ladder: LadderState | None = None
    steps: list[ReplayStep] = []
    pending: Sample | None = None

    def take(sample: Sample, recorded: dict[str, Any] | None) -> None:
        nonlocal ladder
        assert ladder is not None
        decision = decide(window, ladder, policy, sample.t_s, base)
        steps.append(ReplayStep(sample.t_s, decision, recorded))
        ladder = advance(ladder, decision, policy, sample.t_s)

    for rec in recs:
        kind = rec["type"]
        if kind == "sample":
            fields = {k: v for k, v in rec.items() if k != "type"}
            sample = Sample.from_dict(fields)
            if ladder is None:
                ladder = LadderState(rung=header.get("rung", policy.initial_rung),
                                     since_s=header.get("t0_s", sample.t_s),
                                     last_trouble_s=header.get("last_trouble_s"))
            window.append(sample)
            if live:
                pending = sample
            else:
                take(sample, None)
        elif kind == "decision" and pending is not None:
            take(pending, rec)
            pending = None
        elif kind == "skip":
            pending = None
        elif kind == "operator" and ladder is not None:
            extra = {k: v for k, v in rec.items() if k not in ("type", "t_s", "action", "rung")}
            ladder = apply_operator(ladder, str(rec.get("action")), rec.get("rung"), **extra)
    return steps


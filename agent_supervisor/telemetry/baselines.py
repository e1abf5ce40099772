"""``Baselines``: calibrated throughput per mode, as ``decide()`` reads it; the last good
run of another engine version (``EngineUpdate``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["AcceptanceBaselines", "Baselines", "EngineUpdate", "GoodRunFigures"]

#: Calibrated throughput per mode: mode name -> [(concurrency, tokens/s per request)].
Baselines = Mapping[str, Sequence[tuple[float, float]]]

#: Usual acceptance by draft position per mode (calibration, past good runs): mode name ->
#: (position 0, position 1, ...), each d(accepted at i) / d(drafts). Only one k per mode,
#: so positions compare like with like.
AcceptanceBaselines = Mapping[str, Sequence[float]]


@dataclass(frozen=True)
class GoodRunFigures:
    """What a past good run of a mode delivered, with the engine it ran on
    (``mode_baselines`` rows of source ``run``, ``runtime/good_runs.py``).

    ``version``: the engine's version (vLLM ``GET /version``, llama-server ``GET /props``
    ``build_info``) and, for a container runtime, the image; ``acceptance_by_position``:
    d(accepted at i) / d(drafts) over the run (empty without speculation);
    ``tokens_per_second_per_request``: generation tokens/s per running request while
    requests ran (None: not measured); ``concurrency``: the mean of requests running then;
    ``measured_at``: ISO 8601 UTC, for the evidence."""

    version: str
    acceptance_by_position: tuple[float, ...]
    tokens_per_second_per_request: float | None
    concurrency: float
    measured_at: str


@dataclass(frozen=True)
class EngineUpdate:
    """The run ``run_id`` of ``mode`` serves on engine ``version``; ``previous`` is the
    last good run of the same mode (same arguments) on another version: what the
    ``engine_update`` guard compares the run with (issue 29). The runtime builds it once
    the run serves (``runtime/engine_updates.py``); None when the last good run ran on the
    same version, or there is none."""

    run_id: str
    mode: str
    version: str
    previous: GoodRunFigures

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (a trace's ``engine_update`` record, a field case's ``update``)."""
        return {"run_id": self.run_id, "mode": self.mode, "version": self.version,
                "previous": {**dataclasses.asdict(self.previous), "acceptance_by_position":
                             list(self.previous.acceptance_by_position)}}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> EngineUpdate:
        """The inverse of ``to_dict``. Raises: ValueError naming the bad field."""
        try:
            prev = dict(raw["previous"])
            acceptance = tuple(float(a) for a in prev.get("acceptance_by_position") or ())
            rate = prev.get("tokens_per_second_per_request")
            figures = GoodRunFigures(
                version=str(prev["version"]), acceptance_by_position=acceptance,
                tokens_per_second_per_request=None if rate is None else float(rate),
                concurrency=float(prev["concurrency"]),
                measured_at=str(prev.get("measured_at") or ""))
            return cls(run_id=str(raw["run_id"]), mode=str(raw["mode"]),
                       version=str(raw["version"]), previous=figures)
        except KeyError as exc:
            raise ValueError(f"{exc.args[0]}: required") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"previous: {exc}") from None

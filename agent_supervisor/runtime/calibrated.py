"""``Calibrated``: the owner of the baselines the tick decides against (issue 30: no
part sets them on the service from outside).

Two tables, per mode: tokens/s by concurrency (``Baselines``, from ``supervisor
calibrate``) and the usual acceptance by draft position (``AcceptanceBaselines``, from
calibration and good runs). ``load`` reads both from the record at start; good runs
hand a newly learned acceptance table to ``learned`` (``runtime/good_runs.py``). The
tick reads them on use (``throughput``, ``acceptance``), so a table learned while
running counts from the next tick.
"""

from __future__ import annotations

import asyncio
import logging

from agent_supervisor.policy import Policy
from agent_supervisor.record.baselines import load_acceptance, load_baselines
from agent_supervisor.record.store import Store
from agent_supervisor.telemetry.baselines import AcceptanceBaselines, Baselines

__all__ = ["Calibrated"]

logger = logging.getLogger(__name__)


class Calibrated:
    """The calibrated baselines in force (empty until ``load``)."""

    def __init__(self) -> None:
        self._throughput: Baselines = {}
        self._acceptance: AcceptanceBaselines = {}

    def throughput(self) -> Baselines:
        """Tokens/s by concurrency per mode (``{}``: none calibrated)."""
        return self._throughput

    def acceptance(self) -> AcceptanceBaselines:
        """The usual acceptance by draft position per mode (``{}``: none known)."""
        return self._acceptance

    def learned(self, acceptance: AcceptanceBaselines) -> None:
        """Good runs learned a new acceptance table: it replaces the one in force."""
        self._acceptance = acceptance

    async def load(self, store: Store, policy: Policy) -> None:
        """Read both tables from the record (in a thread; the database may be slow) and
        log the throughput table. Raises as ``record.baselines.load_baselines``."""
        self._throughput = await asyncio.to_thread(load_baselines, store, policy)
        self._acceptance = await asyncio.to_thread(load_acceptance, store, policy)
        if self._throughput:
            logger.info("calibrated baselines: %s", ", ".join(
                f"{m} {[f'{c:g}: {t:.0f} tok/s' for c, t in v]}"
                for m, v in self._throughput.items()))

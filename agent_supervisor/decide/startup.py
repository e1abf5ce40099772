"""The start rung after a host reset: a decision, so it lives with the others. Pure.

After the host went down with the engine running, ``storage.after_host_reset`` picks
the first rung: ``one_rung_down`` (default) starts one rung safer than the engine that
was running, ``same_rung`` starts on it again, ``initial`` ignores it (the policy's
``initial_rung``). Why one rung down by default: on a GB10 a host reset with the engine
running is how a unified-memory exhaustion ends, and the same mode is the likeliest to
exhaust it again (DESIGN.md, "Facts").
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

__all__ = ["AfterHostReset", "rung_of", "start_rung_after_reset"]


class AfterHostReset(StrEnum):
    """``storage.after_host_reset``: the first rung after the host went down with the
    engine running."""

    ONE_RUNG_DOWN = "one_rung_down"
    SAME_RUNG = "same_rung"
    INITIAL = "initial"


def rung_of(mode: str, stored_rung: int, modes: Sequence[str]) -> int:
    """The rung of ``mode`` in the current ladder ``modes`` (fastest first), found by
    name (the policy may have changed since); a mode no longer in it keeps its
    ``stored_rung``, clipped to the ladder."""
    return modes.index(mode) if mode in modes else min(stored_rung, len(modes) - 1)


def start_rung_after_reset(mode: str, stored_rung: int, modes: Sequence[str],
                           setting: AfterHostReset) -> int | None:
    """The rung to start on after a host reset with ``mode`` (stored as ``stored_rung``)
    running; None: the policy's initial rung."""
    if setting is AfterHostReset.INITIAL or not modes:
        return None
    rung = rung_of(mode, stored_rung, modes)
    return min(rung + 1, len(modes) - 1) if setting is AfterHostReset.ONE_RUNG_DOWN else rung

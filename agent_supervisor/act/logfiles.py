"""Engine log files stay bounded: rotation of the live one, pruning of old runs' logs."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

__all__ = ["rotate_engine_logs"]

logger = logging.getLogger(__name__)


def rotate_engine_logs(directory: Path, *, current: Path | None, max_bytes: int,
                       keep: int) -> dict[str, int]:
    """Rotate and prune ``directory``'s ``engine-*.log`` files.

    The live log (``current``) past ``max_bytes`` is copied to ``<name>.1`` and truncated
    in place (copytruncate: the engine keeps writing to its open, O_APPEND descriptor;
    the in-memory tail notices the truncation). Logs of other runs beyond the newest
    ``keep`` are deleted, with their ``.1``. Returns counts: rotated, deleted.
    """
    out = {"rotated": 0, "deleted": 0}
    if current is not None:
        try:
            if current.stat().st_size > max_bytes:
                shutil.copyfile(current, current.with_name(current.name + ".1"))
                os.truncate(current, 0)
                out["rotated"] = 1
                logger.info("engine log %s rotated (over %d bytes)", current.name, max_bytes)
        except FileNotFoundError:
            pass
    try:
        logs = sorted((p for p in directory.glob("engine-*.log") if p != current),
                      key=lambda p: p.stat().st_mtime, reverse=True)
    except FileNotFoundError:
        return out
    for old in logs[max(0, keep - 1):]:
        for path in (old, old.with_name(old.name + ".1")):
            try:
                path.unlink()
                out["deleted"] += 1
            except FileNotFoundError:
                continue
    return out

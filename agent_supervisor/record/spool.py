"""The spool: records the database could not take wait in a JSON Lines file, in order.

One record per line (``records.record_to_json``), appended and fsynced. ``replay``
applies the lines oldest first and stops at the first one the database still cannot
take; what was applied leaves the file. Applying is idempotent (each record carries its
key), so a replay cut short by a crash, or a record whose write reached the database
before the error did, is never written twice.

A line that can never apply (unreadable, or refused for a reason other than the
database being unavailable) goes to ``<name>.rejected.jsonl`` with the reason, never
silently away: any exception while reading or applying one line rejects that line, and
the lines after it still replay (issue 17: one valid-JSON-but-wrong line used to stop 20
later records). The rejected file is fsynced per entry and rotated to ``.1`` past
``rejected_max_bytes``.

A torn last line (the process was killed mid-append: a write of a large record is not
atomic, the kernel stops it between pages on SIGKILL) is cut when the spool is opened,
so the next record is not glued onto it. Such a line was never acknowledged (``append``
returns only after the fsync of the whole line), so cutting it loses nothing that was
promised; it is kept in the rejected file all the same.

When the disk refuses the spool itself, lines wait in memory (and go to the file first
at the next append). Past ``max_bytes`` only telemetry and heartbeats
are dropped (counted in ``dropped``); incidents, transitions and runs are always kept.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent_supervisor.errors import StoreError
from agent_supervisor.record.database import is_unavailable
from agent_supervisor.record.records import (
    AddTelemetry,
    Record,
    ServiceHeartbeat,
    record_from_json,
    record_to_json,
)

__all__ = ["DEFAULT_MAX_REJECTED_BYTES", "DEFAULT_MAX_SPOOL_BYTES", "ReplayResult", "Spool"]

logger = logging.getLogger(__name__)

#: 256 MiB: about 300 days of 10-s telemetry rows for one host, so only a database gone
#: for months fills it; past it the spool keeps incidents and runs, drops telemetry.
DEFAULT_MAX_SPOOL_BYTES = 256 * 1024 * 1024

#: 16 MiB of rejected lines before the file is rotated to ``.1`` (one older file kept):
#: a poison record is rare, so this holds months of them, and a bug rejecting every
#: record cannot fill the disk the spool needs.
DEFAULT_MAX_REJECTED_BYTES = 16 * 1024 * 1024

_DROPPABLE = (AddTelemetry, ServiceHeartbeat)


@dataclass(frozen=True)
class ReplayResult:
    """What one replay did: records written, skipped (their key was applied before),
    rejected (moved to the rejected file), and still waiting (the database refused)."""

    applied: int = 0
    skipped: int = 0
    rejected: int = 0
    remaining: int = 0


class Spool:
    """Records waiting for the database, in the order they were made.

    Not thread-safe: one thread (the writer's) uses it. ``len(spool)`` is how many
    records wait (file and memory).
    """

    def __init__(self, path: Path, *, max_bytes: int = DEFAULT_MAX_SPOOL_BYTES,
                 rejected_max_bytes: int = DEFAULT_MAX_REJECTED_BYTES) -> None:
        self.path = path
        self.rejected_path = path.with_name(path.stem + ".rejected.jsonl")
        self.max_bytes = max_bytes
        self.rejected_max_bytes = rejected_max_bytes
        self.dropped = 0
        self.torn_cut = 0
        """Bytes of a torn last line cut when the spool was opened (0: none)."""
        self._memory: list[str] = []
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._cut_torn_tail()
        self._count = len(self._file_lines() or [])

    def _cut_torn_tail(self) -> None:
        """Cut a last line without its newline (see the module doc), keeping it aside."""
        try:
            with open(self.path, "r+b") as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    return
                f.seek(size - 1)
                if f.read(1) == b"\n":
                    return
                start = size
                while start > 0:                 # back to the last newline, in blocks
                    step = min(65536, start)
                    f.seek(start - step)
                    block = f.read(step)
                    nl = block.rfind(b"\n")
                    if nl >= 0:
                        start = start - step + nl + 1
                        break
                    start -= step
                f.seek(start)
                torn = f.read()
                f.truncate(start)
                f.flush()
                os.fsync(f.fileno())
        except FileNotFoundError:
            return
        except OSError as exc:
            logger.error("spool %s: cannot check its last line: %s", self.path, exc)
            return
        self.torn_cut = len(torn)
        logger.warning("spool %s: cut a torn last line of %d bytes (a write cut short by a "
                       "kill; never acknowledged), kept in %s", self.path, len(torn),
                       self.rejected_path)
        self.reject(torn.decode("utf-8", errors="replace"), "torn last line, cut on open")

    def __len__(self) -> int:
        return self._count

    def _file_lines(self) -> list[str] | None:
        """The lines in the file; None (logged) when it exists but cannot be read."""
        try:
            with open(self.path, encoding="utf-8", errors="replace", newline="\n") as f:
                return [line.rstrip("\n") for line in f if line.strip()]
        except FileNotFoundError:
            return []
        except OSError as exc:
            logger.error("spool %s cannot be read: %s", self.path, exc)
            return None

    def _append_lines(self, lines: list[str]) -> None:
        """Append ``lines`` durably; on failure cut the file back to where it was (a
        half-written line would spoil the next one) and raise OSError."""
        with open(self.path, "a", encoding="utf-8", opener=_private) as f:
            size = f.tell()
            try:
                f.write("".join(line + "\n" for line in lines))
                f.flush()
                os.fsync(f.fileno())
            except OSError:
                f.truncate(size)
                raise

    def append(self, record: Record) -> None:
        """Keep ``record`` until the database takes it. Never raises for a full or
        read-only disk: the line waits in memory and the error is logged."""
        if isinstance(record, _DROPPABLE) and self._size() >= self.max_bytes:
            self.dropped += 1
            logger.warning("spool %s is over %d bytes: %s dropped (%d so far)", self.path,
                           self.max_bytes, record.kind, self.dropped)
            return
        line = record_to_json(record)
        pending = [*self._memory, line]
        try:
            self._append_lines(pending)
            self._memory = []
        except OSError as exc:
            self._memory = pending
            logger.error("spool %s cannot be written (%s): %d records held in memory",
                         self.path, exc, len(self._memory))
        self._count += 1

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def replay(self, apply: Callable[[Record], bool]) -> ReplayResult:
        """Apply waiting records oldest first with ``apply`` (``Store.apply``: True when
        written, False when already there); stop at the first the database cannot take.

        Raises nothing: a record ``apply`` fails on for any reason but an unavailable
        database is moved to the rejected file.
        """
        file_lines = self._file_lines()
        if file_lines is None:          # never rewrite a file that could not be read
            return ReplayResult(remaining=self._count)
        lines = file_lines + self._memory
        applied = skipped = rejected = 0
        stop = len(lines)
        for i, line in enumerate(lines):
            try:
                record = record_from_json(line)
            except Exception as exc:  # noqa: BLE001 - ValueError; any other is a bug: same fate
                self.reject(line, f"unreadable: {exc}")
                rejected += 1
                continue
            try:
                if apply(record):
                    applied += 1
                else:
                    skipped += 1
            except StoreError as exc:
                if is_unavailable(exc):
                    stop = i
                    break
                self.reject(line, str(exc))
                rejected += 1
            except Exception as exc:
                # A poison record (a bug, not the database) must not block the rest.
                logger.exception("spooled %s could not be applied", record.kind)
                self.reject(line, repr(exc))
                rejected += 1
        remaining = lines[stop:]
        self._rewrite(remaining, from_memory=self._memory[max(0, stop - len(file_lines)):])
        self._count = len(remaining)
        return ReplayResult(applied, skipped, rejected, len(remaining))

    def _rewrite(self, remaining: list[str], *, from_memory: list[str]) -> None:
        """Leave only ``remaining`` in the file (atomically). If the disk refuses, the
        old file stays (its applied lines are skipped by key next time) and the memory
        lines still waiting stay in memory."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            if not remaining:
                self.path.unlink(missing_ok=True)
            else:
                with open(tmp, "w", encoding="utf-8", opener=_private) as f:
                    f.write("".join(line + "\n" for line in remaining))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            self._memory = []
        except OSError as exc:
            logger.error("spool %s cannot be rewritten (%s): applied records stay in it "
                         "and will be skipped by key", self.path, exc)
            self._memory = from_memory

    def reject(self, line: str, reason: str) -> None:
        """Keep ``line`` in the rejected file with ``reason`` (fsynced; the file rotated
        to ``.1`` past ``rejected_max_bytes``), or, failing that, in the log."""
        logger.error("spooled record rejected (%s), kept in %s", reason[:500],
                     self.rejected_path)
        entry = json.dumps({"error": reason, "line": line}, separators=(",", ":"))
        try:
            self._rotate_rejected()
            with open(self.rejected_path, "a", encoding="utf-8", opener=_private) as f:
                f.write(entry + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            logger.error("cannot write %s (%s); the rejected record: %s",
                         self.rejected_path, exc, line)

    def _rotate_rejected(self) -> None:
        try:
            size = self.rejected_path.stat().st_size
        except FileNotFoundError:
            return
        if size >= self.rejected_max_bytes:
            os.replace(self.rejected_path, self.rejected_path.with_name(
                self.rejected_path.name + ".1"))
            logger.warning("rejected file %s rotated to .1 (%d bytes)", self.rejected_path, size)


def _private(path: str, flags: int) -> int:
    """``open`` opener: a new file is created 0600 whatever the umask (issue 17)."""
    return os.open(path, flags, 0o600)

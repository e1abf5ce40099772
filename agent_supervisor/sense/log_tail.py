"""``LogTail``: the last lines of the engine's log, kept in memory.

The engine writes straight to its log file (not through a pipe to the supervisor), so it
survives the supervisor being killed. The tail is read from that file incrementally:
each read takes only the bytes appended since the last one.

One reader, one cursor (issue 30): the sensors own it (``Sensors``,
agent_supervisor/sense/collect.py) and take the new lines with ``poll()`` at each
sample, to classify them. The launcher makes one per run (it knows where the run logs
and where an adopted run's log starts); the incident path sees it only through
``catch_up()`` and ``text()``, a read-only view: ``catch_up()`` brings the kept lines up
to date and leaves the lines it read for the next ``poll()``. (Until 2026-12-02 the
incident path called ``poll()`` too: a line read there was never classified. CI saw it:
llama-server's ``GGML_ASSERT ... failed``, logged 1.5 s before its SIGABRT, was taken by
an incident recorded in between, and the crash was restarted on the speculative rung
instead of stepping to no speculation.)
"""

from __future__ import annotations

import logging
from collections import deque
from pathlib import Path

__all__ = ["LogTail"]

logger = logging.getLogger(__name__)


class LogTail:
    """A bounded ring buffer of the newest lines of one log file.

    ``max_lines`` lines are kept; one read takes at most ``max_read_bytes`` (older
    bytes beyond that are skipped, never buffered), so memory stays bounded however fast
    the engine logs.
    """

    def __init__(self, path: Path, max_lines: int = 200, max_read_bytes: int = 256 * 1024):
        self.path = path
        self.max_read_bytes = max_read_bytes
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._unpolled: deque[str] = deque()
        """Lines ``catch_up()`` read that no ``poll()`` has returned yet: at most
        ``max_read_bytes`` of them, the bound of one ``poll()``'s own read."""
        self._unpolled_bytes = 0
        self._offset = 0
        self._partial = b""
        self.read_errors = 0
        """Reads in a row the file refused (EIO, EMFILE, a directory in its place)."""

    def poll(self) -> list[str]:
        """Read what was appended since the last call; returns the new complete lines,
        those a ``catch_up()`` read since the last ``poll()`` first.

        Never raises: a file that cannot be read right now (any OSError: too many open
        files, an I/O error, EACCES) gives no lines this time, counted in
        ``read_errors`` and logged once per run of errors (issue 17: the tick called
        this and died with it).
        """
        new = [*self._unpolled, *self._read()]
        self._unpolled.clear()
        self._unpolled_bytes = 0
        return new

    def catch_up(self) -> None:
        """Bring the kept lines up to date (for ``text()``) without taking the new ones
        from the next ``poll()``: the newest ``max_read_bytes`` of them wait for it, as
        much as a ``poll()`` in its place would have returned. Never raises."""
        for line in self._read():
            self._unpolled.append(line)
            self._unpolled_bytes += len(line) + 1
        while self._unpolled_bytes > self.max_read_bytes:
            self._unpolled_bytes -= len(self._unpolled.popleft()) + 1

    def _read(self) -> list[str]:
        """The complete lines appended since the last read, also added to the kept ones."""
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                if size < self._offset:          # truncated or replaced: start over
                    self._offset, self._partial = 0, b""
                start = max(self._offset, size - self.max_read_bytes)
                if start > self._offset:
                    self._partial = b""          # skipped bytes: the partial line is lost
                f.seek(start)
                data = f.read(size - start)
        except FileNotFoundError:
            return []
        except OSError as exc:
            if not self.read_errors:
                logger.warning("engine log %s cannot be read: %s", self.path, exc)
            self.read_errors += 1
            return []
        if self.read_errors:
            logger.info("engine log %s readable again after %d failed reads", self.path,
                        self.read_errors)
            self.read_errors = 0
        self._offset = start + len(data)
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        new = [c.decode("utf-8", errors="replace").rstrip("\r") for c in chunks]
        self._lines.extend(new)
        return new

    def text(self) -> str:
        """The kept lines (plus an unterminated last line, if any) as one string."""
        lines = list(self._lines)
        if self._partial:
            lines.append(self._partial.decode("utf-8", errors="replace"))
        return "\n".join(lines)

"""Log lines with journald priorities when stderr is the journal.

Under systemd, a service's stderr is a stream to journald, and ``$JOURNAL_STREAM`` holds
that stream's ``device:inode`` (systemd.exec(5)). A line that starts with ``<N>``, N a
syslog priority, is stored with that priority (sd-daemon(3), SD_WARNING...), so
``journalctl -p warning -u agent-supervisor-...`` finds the supervisor's warnings and
errors. The prefix is added only when stderr really is that stream (a shell started from
the service keeps the variable but not the stream).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

__all__ = ["JournalPriorityFormatter", "stderr_is_journal"]

#: logging level -> syslog priority (sd-daemon(3): <7> debug ... <2> crit).
PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4),
              (logging.INFO, 6), (logging.DEBUG, 7))


def stderr_is_journal(environ: Mapping[str, str] | None = None, fd: int = 2) -> bool:
    """Whether ``fd`` is the journal stream named by ``$JOURNAL_STREAM``."""
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    dev, _, ino = value.partition(":")
    if not (dev.isdigit() and ino.isdigit()):
        return False
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


class JournalPriorityFormatter(logging.Formatter):
    """Wraps a formatter: ``<N>`` before each line of its output (every line of a
    traceback too, so journald keeps them at the record's priority)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prio = next(p for level, p in PRIORITIES if record.levelno >= level) \
            if record.levelno >= logging.DEBUG else 7
        return "\n".join(f"<{prio}>{line}" for line in self.inner.format(record).split("\n"))

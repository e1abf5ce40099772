"""How every process of the supervisor logs: ``setup_logging`` (the ``supervisor`` command's
``--log-level``/``--log-format``, and the gateway process's own entry,
agent_supervisor/gateway/__main__.py, which does not load the command line's modules).

Text lines (``asctime level logger: message``) or one JSON object per line. Under systemd,
a service's stderr is a stream to journald, and ``$JOURNAL_STREAM`` holds that stream's
``device:inode`` (systemd.exec(5)): journald stamps every line itself, and a line that
starts with ``<N>``, N a syslog priority, is stored with that priority (sd-daemon(3),
SD_WARNING...), so ``journalctl -p warning -u agent-supervisor-...`` finds the
supervisor's warnings and errors. The prefix is added only when stderr really is that
stream (a shell started from the service keeps the variable but not the stream).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime

__all__ = ["JournalPriorityFormatter", "JsonFormatter", "setup_logging", "stderr_is_journal"]

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


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC ISO), level, logger, message (+ exc_info)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
               "level": record.levelname, "logger": record.name,
               "message": record.getMessage()}
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(level: str, fmt: str = "text") -> None:
    """Log to stderr at ``level`` (``debug``, ``info``, ``warning``, ``error``) as ``fmt``
    (``text`` or ``json``), with journald priorities when stderr is the journal; the
    chatty libraries (APScheduler's job runs, httpx's requests, Alembic) at WARNING."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        # Under systemd, journald stamps every line itself.
        stamp = "" if "JOURNAL_STREAM" in os.environ else "%(asctime)s "
        handler.setFormatter(logging.Formatter(stamp + "%(levelname)s %(name)s: %(message)s"))
    if stderr_is_journal():
        handler.setFormatter(JournalPriorityFormatter(handler.formatter))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler])
    # APScheduler logs every job run at INFO; its warnings (missed runs) stay visible.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # httpx, and httpx2 under the OpenAI SDK the load generator uses, log every request.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)

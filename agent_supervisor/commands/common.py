"""What the commands share: exit statuses, ``--since`` parsing, opening the store."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from agent_supervisor.policy import Policy
from agent_supervisor.record.store import Store

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "open_store", "since", "store_of"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def since(text: str | None) -> datetime | None:
    """``--since``: an ISO time (UTC if naive) or an age like 30m, 12h, 7d; None: none.
    Raises SystemExit(EXIT_USAGE) naming the value otherwise (exit 2, as every usage error)."""
    if text is None:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text)
    if m:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
        return datetime.now(UTC) - timedelta(seconds=float(m.group(1)) * unit)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as exc:
        print(f"supervisor: --since: {text!r} is neither an ISO time nor an age like 12h",
              file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from exc
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def open_store(policy: Policy) -> Store:
    """The policy's store (the caller closes it). Raises StoreError."""
    return Store.open(policy.database_url, fleet=policy.fleet,
                      host=policy.storage.host_name)


@contextlib.contextmanager
def store_of(policy: Policy) -> Iterator[Store]:
    """The policy's store, closed on the way out."""
    store = open_store(policy)
    try:
        yield store
    finally:
        store.close()

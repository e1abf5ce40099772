"""The headless Chromium the browser tests drive: ``CHROMIUM`` (its path) and
``CHROMIUM_ARGS`` (flags that work on these machines)."""

from __future__ import annotations

import shutil

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


#: Flags that work on these machines (no GPU, no sandbox for root, no network calls home).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]

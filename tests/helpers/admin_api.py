"""The admin API's bearer token for the API tests: ``TOKEN`` and ``auth()`` (its headers)."""

from __future__ import annotations

TOKEN = "test-admin-token"


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}

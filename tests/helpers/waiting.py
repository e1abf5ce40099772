"""Polling until a condition holds, for async tests.

``wait_for(predicate, timeout, what)``: polls every 20 ms, raises AssertionError naming
``what`` after ``timeout`` seconds. ``until(predicate, timeout)``: polls every 50 ms, raises
AssertionError("timed out"). (The sync ``wait`` of the production tests lives in
tests/helpers/production.py.)
"""

from __future__ import annotations

import asyncio
import time


async def wait_for(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def until(predicate, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")

"""Admission control: at most N requests in flight, a bounded FIFO queue behind them,
and a hold that queues everything while the engine is switched.

One asyncio loop; no locks needed beyond the loop's own ordering.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from agent_supervisor.policy.gateway import GatewayLimits

__all__ = ["Admission", "Rejected", "Slot"]


class Rejected(Exception):
    """The request is not admitted. ``reason`` is ``queue_full``, ``queue_timeout`` or
    ``gateway_stopping``; ``retry_after_seconds`` is the hint for the client's
    Retry-After header; ``status`` the HTTP status (429, or 503 for a gateway that
    stops)."""

    def __init__(self, reason: str, retry_after_seconds: int, message: str, *,
                 status: int = 429) -> None:
        self.reason = reason
        self.retry_after_seconds = retry_after_seconds
        self.status = status
        super().__init__(message)


@dataclass
class _Waiter:
    future: asyncio.Future[None]
    prompt_tokens: int
    deadline_s: float
    body_bytes: int = 0


class Slot:
    """One slot ``Admission.acquire`` gave, given back once by ``aclose`` (a stream
    closes it when it ends, whichever way it ends). ``on_close``: called then too (the
    agent key's own place, agent_supervisor/gateway/key_limits.py)."""

    __slots__ = ("_admission", "_held", "_on_close", "_prompt_tokens")

    def __init__(self, admission: Admission, prompt_tokens: int,
                 on_close: Callable[[], None] | None = None) -> None:
        self._admission, self._prompt_tokens, self._held = admission, prompt_tokens, True
        self._on_close = on_close

    async def aclose(self) -> None:
        """Give the slot back (again: nothing)."""
        if self._held:
            self._held = False
            self._admission.give_back(self._prompt_tokens)
            if self._on_close is not None:
                self._on_close()


class Admission:
    """Slots and a FIFO queue.

    ``limits``: the current mode's (None fields: unlimited), scaled by ``shed_factor``
    while shed. ``hold()``: no new slot is granted (requests queue, with
    ``hold_timeout_seconds`` instead of the mode's queue timeout, and ``max_held``
    instead of the mode's queue bound) until ``release()``. Whether held or not, the
    bodies of all queued requests together stay under ``max_queued_bytes`` (issue 17: 500
    queued 1 MB requests during a switch grew the process to 1 GiB). ``drained()`` waits
    until nothing is in flight.
    """

    def __init__(self, limits: GatewayLimits, *, shed_factor: float = 0.5,
                 hold_timeout_seconds: float = 600.0, max_held: int | None = None,
                 max_queued_bytes: int | None = None) -> None:
        self.limits = limits
        self.shed_factor = shed_factor
        self.hold_timeout_seconds = hold_timeout_seconds
        self.max_held = max_held
        self.max_queued_bytes = max_queued_bytes
        self.queued_bytes = 0
        self.shed = False
        self.held = False
        self.in_flight = 0
        self.prompt_tokens_in_flight = 0
        self._queue: deque[_Waiter] = deque()
        self._idle = asyncio.Event()
        self._idle.set()

    # -- limits ----------------------------------------------------------------------

    def _scaled(self, value: int | None) -> int | None:
        if value is None or not self.shed:
            return value
        return max(1, int(value * self.shed_factor))

    @property
    def max_concurrency(self) -> int | None:
        """The concurrency limit in force (after shedding)."""
        return self._scaled(self.limits.max_concurrency)

    @property
    def max_queue(self) -> int | None:
        """The queue bound in force (after shedding)."""
        return self._scaled(self.limits.max_queue)

    @property
    def queued(self) -> int:
        """Requests waiting for a slot."""
        return len(self._queue)

    @property
    def prompt_tokens_queued(self) -> int:
        """Prompt tokens of the waiting requests (estimates)."""
        return sum(w.prompt_tokens for w in self._queue)

    def set_limits(self, limits: GatewayLimits) -> None:
        """New mode, new limits: takes effect at once (waiters may be admitted now)."""
        self.limits = limits
        self._wake()

    def set_shed(self, shed: bool) -> None:
        """Lower (True) or restore (False) the limits."""
        self.shed = shed
        self._wake()

    def hold(self) -> None:
        """Stop granting slots; new requests queue until ``release``. Requests already
        queued get the hold's longer timeout too: a switch must not time them out."""
        self.held = True
        deadline = time.monotonic() + self.hold_timeout_seconds
        for waiter in self._queue:
            waiter.deadline_s = max(waiter.deadline_s, deadline)

    def release(self) -> None:
        """Grant slots again, oldest waiter first."""
        self.held = False
        self._wake()

    def refuse_queued(self, why: str) -> int:
        """Every queued request is refused now (503, ``gateway_stopping``: ``why``) instead
        of waiting for a slot that will not come; returns how many."""
        refused = 0
        while self._queue:
            waiter = self._queue.popleft()
            self.queued_bytes -= waiter.body_bytes
            if not waiter.future.done():
                waiter.future.set_exception(Rejected("gateway_stopping", 5, why, status=503))
                refused += 1
        return refused

    async def drained(self, timeout_seconds: float) -> bool:
        """Wait until no request is in flight; False if ``timeout_seconds`` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_seconds)
        except TimeoutError:
            return False
        return True

    # -- slots -----------------------------------------------------------------------

    def _free(self) -> bool:
        limit = self.max_concurrency
        return not self.held and (limit is None or self.in_flight < limit)

    def _grant(self, prompt_tokens: int) -> None:
        self.in_flight += 1
        self.prompt_tokens_in_flight += prompt_tokens
        self._idle.clear()

    def _wake(self) -> None:
        while self._queue and self._free():
            waiter = self._queue.popleft()
            self.queued_bytes -= waiter.body_bytes
            if waiter.future.done():
                continue
            self._grant(waiter.prompt_tokens)
            waiter.future.set_result(None)

    def _done(self, prompt_tokens: int) -> None:
        self.in_flight -= 1
        self.prompt_tokens_in_flight -= prompt_tokens
        if self.in_flight == 0:
            self._idle.set()
        self._wake()

    async def acquire(self, prompt_tokens: int = 0, body_bytes: int = 0) -> float:
        """Take one slot, queuing for it if need be; returns the seconds queued. Give it
        back with ``give_back(prompt_tokens)`` (``Slot`` does it once).

        Raises Rejected when the queue is full (in requests or bytes) or the wait times
        out. Cancelled while queued (the client left): the request leaves the queue and
        is never sent.
        """
        t0 = time.monotonic()
        if self._free() and not self._queue:
            self._grant(prompt_tokens)
            return 0.0
        bound = self.max_held if self.held else self.max_queue
        if bound is not None and len(self._queue) >= bound:
            why = "held while the engine is switched" if self.held else "queued"
            raise Rejected("queue_full", 1, f"{self.in_flight} requests in flight and "
                           f"{len(self._queue)} {why}: the limit is {bound}")
        if self.max_queued_bytes is not None and \
                self.queued_bytes + body_bytes > self.max_queued_bytes:
            raise Rejected("queue_bytes", 1, f"the queued requests' bodies hold "
                           f"{self.queued_bytes} bytes: the limit is "
                           f"{self.max_queued_bytes}")
        timeout = self.hold_timeout_seconds if self.held else self.limits.queue_timeout_seconds
        waiter = _Waiter(asyncio.get_running_loop().create_future(), prompt_tokens,
                         t0 + timeout, body_bytes)
        self._queue.append(waiter)
        self.queued_bytes += body_bytes
        try:
            while not waiter.future.done():
                left = waiter.deadline_s - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(waiter.future), left)
        except TimeoutError:
            waiter.future.cancel()
            self._remove(waiter)
            waited = time.monotonic() - t0
            raise Rejected("queue_timeout", max(1, int(timeout // 4)),
                           f"no slot within {waited:.0f} s") from None
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._done(prompt_tokens)
            waiter.future.cancel()
            self._remove(waiter)
            raise
        return time.monotonic() - t0

    def give_back(self, prompt_tokens: int = 0) -> None:
        """Give back a slot ``acquire`` gave (the next queued request takes it)."""
        self._done(prompt_tokens)

    @asynccontextmanager
    async def slot(self, prompt_tokens: int = 0, body_bytes: int = 0) -> AsyncIterator[float]:
        """``acquire`` for the body of the ``async with`` (yields the seconds queued),
        then ``give_back``. Raises as ``acquire`` does."""
        waited = await self.acquire(prompt_tokens, body_bytes)
        try:
            yield waited
        finally:
            self._done(prompt_tokens)

    def _remove(self, waiter: _Waiter) -> None:
        try:
            self._queue.remove(waiter)
        except ValueError:
            return
        self.queued_bytes -= waiter.body_bytes

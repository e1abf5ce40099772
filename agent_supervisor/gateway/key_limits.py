"""Per-key limits and counters under ``auth: keys`` (issue 33).

Each ``gateway.api_keys`` entry may carry ``max_concurrency`` (its generation requests in
the gateway at once, queued or in flight) and ``requests_per_minute`` (admitted in any
60 s, a sliding window). A request over either is refused at once, before it takes a
place in the mode's queue: 429 with ``Retry-After`` in the caller's API shape (1 s for
concurrency; for the rate, the seconds until the oldest request leaves the minute), code
``key_concurrency`` or ``key_rate``, so one agent cannot take the whole box's slots.

Metrics, labelled by the key's *name* from the policy (never the key nor its digest; the
names are the policy's, so the label set is bounded, and each series exists at 0 from
the start so ``increase()`` sees a key's first request):

- ``supervisor_gateway_key_requests_total{key}``: requests admitted past the key check,
  every path;
- ``supervisor_gateway_key_requests_in_flight{key}``: its generation requests in the
  gateway now;
- ``supervisor_gateway_key_rejections_total{key,reason}``: refused by these limits.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from agent_supervisor.policy.gateway import ApiKey

__all__ = ["KEY_NAME", "RATE_WINDOW_SECONDS", "KeyLimits", "KeyRefused"]

#: Scope key: the name of the agent key a request was admitted with (``auth: keys``).
KEY_NAME = "supervisor.key_name"
#: The rate limit's window (seconds): ``requests_per_minute``.
RATE_WINDOW_SECONDS = 60.0


class KeyRefused(Exception):
    """Over a key's own limit: ``reason`` (``key_concurrency``, ``key_rate``) and the
    ``retry_after_seconds`` hint."""

    def __init__(self, reason: str, retry_after_seconds: int, message: str) -> None:
        self.reason = reason
        self.retry_after_seconds = retry_after_seconds
        super().__init__(message)


class KeyLimits:
    """The keys' limits, their load and their metrics in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "supervisor_gateway_key_requests_total",
            "Requests through the gateway by the agent key's name (from the policy).",
            ["key"], registry=registry)
        self.in_flight = Gauge(
            "supervisor_gateway_key_requests_in_flight",
            "Generation requests in the gateway (queued or in flight) by key name.",
            ["key"], registry=registry)
        self.rejections = Counter(
            "supervisor_gateway_key_rejections_total",
            "Requests refused by a key's own limits, by key name and reason "
            "(key_concurrency, key_rate).", ["key", "reason"], registry=registry)
        self.keys: dict[str, ApiKey] = {}
        self._load: dict[str, int] = {}
        self._admitted: dict[str, deque[float]] = {}

    def apply(self, keys: Iterable[ApiKey]) -> None:
        """A policy's keys (at start and at every reload): their series made at 0."""
        self.keys = {k.name: k for k in keys}
        for name in self.keys:
            self.requests.labels(name)
            self.in_flight.labels(name)
            for reason in ("key_concurrency", "key_rate"):
                self.rejections.labels(name, reason)

    def seen(self, name: str) -> None:
        """A request by ``name``'s key got past the key check."""
        self.requests.labels(name).inc()

    def take(self, name: str, now_s: float | None = None) -> Callable[[], None]:
        """A place for one generation request of ``name``: returns the call that gives
        it back (once). Raises KeyRefused over the key's limits."""
        key = self.keys.get(name)
        if key is None:
            return _nothing
        now = time.monotonic() if now_s is None else now_s
        load = self._load.get(name, 0)
        if key.max_concurrency is not None and load >= key.max_concurrency:
            self._refused(name, "key_concurrency")
            raise KeyRefused("key_concurrency", 1, f"the key {name} has {load} requests in "
                             f"the gateway: its limit is {key.max_concurrency}")
        if key.requests_per_minute is not None:
            stamps = self._admitted.setdefault(name, deque())
            while stamps and stamps[0] <= now - RATE_WINDOW_SECONDS:
                stamps.popleft()
            if len(stamps) >= key.requests_per_minute:
                self._refused(name, "key_rate")
                wait = max(1, math.ceil(stamps[0] + RATE_WINDOW_SECONDS - now))
                raise KeyRefused("key_rate", wait, f"the key {name} sent "
                                 f"{len(stamps)} requests in the last minute: its limit is "
                                 f"{key.requests_per_minute}")
            stamps.append(now)
        self._load[name] = load + 1
        self.in_flight.labels(name).inc()
        given = False

        def give_back() -> None:
            nonlocal given
            if not given:
                given = True
                self._load[name] -= 1
                self.in_flight.labels(name).dec()
        return give_back

    def _refused(self, name: str, reason: str) -> None:
        self.rejections.labels(name, reason).inc()


def _nothing() -> None:
    return None

"""The gateway's own counters, for the supervisor's /metrics (prometheus_client).

Names follow Prometheus conventions: ``supervisor_`` prefix, base units, ``_total``.
A registry is passed in, never the global one (no module-level singletons).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from agent_supervisor.gateway.resume.resumption import Resumption, StreamTap

__all__ = ["GatewayMetrics", "ResumptionLog"]

logger = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class GatewayMetrics:
    """Requests by outcome, rejections by reason, queue wait, upstream latency, load."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "supervisor_gateway_requests_total",
            "Requests through the gateway, by outcome (ok, upstream_error, rejected, "
            "broken_stream, client_disconnected).", ["outcome"], registry=registry)
        self.rejections = Counter(
            "supervisor_gateway_rejections_total",
            "Requests refused by the gateway, by reason (queue_full, queue_timeout, "
            "queue_bytes, prompt_too_long, unauthorized, path, bad_body, body_too_large).",
            ["reason"], registry=registry)
        self.retries = Counter(
            "supervisor_gateway_retries_total",
            "Non-streaming or not-yet-started requests retried once on a new engine.",
            registry=registry)
        self.resumptions = Counter(
            "supervisor_gateway_resumptions_total",
            "Streams cut by the engine and continued on the next one, by path, continuation "
            "(token or text) and outcome (resumed, failed).",
            ["path", "continuation", "outcome"], registry=registry)
        self.queue_wait = Histogram(
            "supervisor_gateway_queue_wait_seconds", "Time a request waited for a slot.",
            buckets=_LATENCY_BUCKETS, registry=registry)
        self.upstream_latency = Histogram(
            "supervisor_gateway_upstream_latency_seconds",
            "Time from sending a request to the engine to its response headers.",
            buckets=_LATENCY_BUCKETS, registry=registry)
        self.in_flight = Gauge("supervisor_gateway_requests_in_flight",
                               "Requests holding a slot.", registry=registry)
        self.queued = Gauge("supervisor_gateway_requests_queued",
                            "Requests waiting for a slot.", registry=registry)


class ResumptionLog:
    """Every resumption: a counter by path and outcome, an INFO line, and the last 100
    in memory (``/gateway/status``)."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics
        self.recent: deque[dict[str, Any]] = deque(maxlen=100)
        self.seq = 0
        """Numbers the entries (the supervisor asks for those above the last it saw)."""

    def record(self, plan: Resumption, tap: StreamTap, *, ok: bool, waited: float) -> None:
        """One resumption tried (``ok``: the continuation is streaming)."""
        tokens = tap.tokens_sent()
        kind = "token" if plan.used_tokens else "text"
        outcome = "resumed" if ok else "failed"
        self.metrics.resumptions.labels(plan.path, kind, outcome).inc()
        self.seq += 1
        self.recent.append({"seq": self.seq, "at": time.time(), "path": plan.path,
                            "continuation": kind,
                            "tokens_before": tokens, "waited_seconds": round(waited, 3),
                            "outcome": outcome})
        logger.info("stream on %s %s after %d tokens (%s-level continuation, %.1f s held)",
                    plan.path, outcome, tokens, kind, waited)

    def resent(self, path: str, *, waited: float) -> None:
        """A request that failed before any byte reached its client, sent again whole
        to the engine that came back (the retries metric counts it too)."""
        self.seq += 1
        self.recent.append({"seq": self.seq, "at": time.time(), "path": path,
                            "continuation": "whole", "tokens_before": 0,
                            "waited_seconds": round(waited, 3), "outcome": "resent"})

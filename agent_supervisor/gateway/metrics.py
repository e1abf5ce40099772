"""The gateway's own counters, for the supervisor's /metrics (prometheus_client).

Names follow Prometheus conventions: ``supervisor_`` prefix, base units, ``_total``.
A registry is passed in, never the global one (no module-level singletons).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["GatewayMetrics"]

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

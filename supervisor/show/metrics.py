"""The supervisor's own Prometheus metrics (prometheus_client), in the service's registry.

Counters are incremented where things happen (the executor); gauges of what the
supervisor sees are read from the newest Sample at scrape time by ``StateCollector``, so
a scrape always shows the latest tick and nothing is updated twice. Names: ``supervisor_``
prefix, base units in names (``_bytes``, ``_seconds``, ``_celsius``, ``_watts``, ``_ratio``),
``_total`` for counters (prometheus.io "Metric and label naming").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, StateSetMetricFamily
from prometheus_client.registry import Collector

from supervisor.policy import Policy
from supervisor.states import EngineState
from supervisor.telemetry.rates import EngineRates
from supervisor.telemetry.sample import Sample

__all__ = ["SAMPLE_GAUGES", "StateCollector", "SupervisorMetrics"]

#: Sample field -> (metric name, help). Unknown (None) values are left out of a scrape.
SAMPLE_GAUGES: dict[str, tuple[str, str]] = {
    "mem_available_bytes": ("supervisor_mem_available_bytes", "MemAvailable of the host."),
    "mem_total_bytes": ("supervisor_mem_total_bytes", "MemTotal of the host."),
    "psi_memory_some_avg10_ratio": ("supervisor_psi_memory_some_avg10_ratio",
                                    "PSI memory some, 10 s average (0-1)."),
    "psi_memory_full_avg10_ratio": ("supervisor_psi_memory_full_avg10_ratio",
                                    "PSI memory full, 10 s average (0-1)."),
    "gpu_temperature_c": ("supervisor_gpu_temperature_celsius", "GPU temperature (NVML)."),
    "gpu_power_w": ("supervisor_gpu_power_watts", "GPU power draw (NVML)."),
    "gpu_utilization_ratio": ("supervisor_gpu_utilization_ratio", "GPU utilization (0-1)."),
    "kv_cache_usage_ratio": ("supervisor_kv_cache_usage_ratio", "vLLM KV cache usage (0-1)."),
    "requests_running": ("supervisor_engine_requests_running", "Requests the engine runs."),
    "requests_waiting": ("supervisor_engine_requests_waiting", "Requests the engine queues."),
    "engine_rss_bytes": ("supervisor_engine_rss_bytes", "RSS of the engine's process tree."),
    "engine_pss_bytes": ("supervisor_engine_pss_bytes", "PSS of the engine's process tree."),
    "health_latency_seconds": ("supervisor_engine_health_latency_seconds",
                               "Latency of the last /health probe."),
    "tick_lateness_seconds": ("supervisor_tick_lateness_seconds",
                              "How late the last tick ran (CPU starvation of the box)."),
}

#: EngineRates field -> (metric name, help).
RATE_GAUGES: dict[str, tuple[str, str]] = {
    "generation_tokens_per_second": ("supervisor_engine_generation_tokens_per_second",
                                     "Generated tokens per second (last minute)."),
    "prompt_tokens_per_second": ("supervisor_engine_prompt_tokens_per_second",
                                 "Prefilled tokens per second (last minute)."),
    "preemptions_per_second": ("supervisor_engine_preemptions_per_second",
                               "Preemptions per second (last minute)."),
    "spec_acceptance_ratio": ("supervisor_spec_acceptance_ratio",
                              "Speculative draft tokens accepted (0-1, last minute)."),
    "spec_mean_acceptance_length": ("supervisor_spec_mean_acceptance_length",
                                    "1 + accepted tokens per draft (last minute)."),
    "tokens_per_second_per_request": ("supervisor_engine_tokens_per_second_per_request",
                                      "Decode speed of one request (last minute)."),
}


class SupervisorMetrics:
    """Counters of what the service did."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.transitions = Counter(
            "supervisor_transitions_total", "Mode transitions, by from/to mode and actor.",
            ["from_mode", "to_mode", "actor"], registry=registry)
        self.incidents = Counter(
            "supervisor_incidents_total", "Incidents recorded, by kind and severity.",
            ["kind", "severity"], registry=registry)
        self.findings = Counter(
            "supervisor_guard_findings_total",
            "Guard findings acted on or recorded, by guard, kind and severity.",
            ["guard", "kind", "severity"], registry=registry)
        self.decisions = Counter("supervisor_decisions_total",
                                 "Decisions other than hold, by action.", ["action"],
                                 registry=registry)
        self.alerts = Counter("supervisor_alerts_total",
                              "Webhook alerts, by outcome (sent, failed, suppressed).",
                              ["outcome"], registry=registry)


@dataclass
class StateView:
    """What the collector reads at scrape time (callables into the live service)."""

    policy: Callable[[], Policy]
    latest: Callable[[], Sample | None]
    rates: Callable[[], EngineRates | None]
    rung: Callable[[], int]
    spooled: Callable[[], int]


class StateCollector(Collector):
    """Gauges of the newest Sample and of the ladder, built at each scrape."""

    def __init__(self, view: StateView) -> None:
        self.view = view

    def collect(self) -> Iterator[object]:
        v = self.view
        policy = v.policy()
        modes = [m.name for m in policy.modes]
        rung = min(v.rung(), len(modes) - 1)
        info = InfoMetricFamily("supervisor_mode", "The mode the ladder is on.")
        info.add_metric([], {"mode": modes[rung], "rung": str(rung),
                             "fleet": policy.fleet})
        yield info
        state = StateSetMetricFamily("supervisor_mode_state", "One series per mode; 1 for "
                                     "the current one.", labels=[])
        state.add_metric([], {m: i == rung for i, m in enumerate(modes)})
        yield state
        g = GaugeMetricFamily("supervisor_rung", "Current rung (0 = fastest mode).")
        g.add_metric([], rung)
        yield g
        floor = GaugeMetricFamily("supervisor_memory_floor_bytes",
                                  "The memory floor guard's threshold on MemAvailable.")
        floor.add_metric([], policy.guards.memory_floor.min_available_bytes)
        yield floor
        spool = GaugeMetricFamily("supervisor_store_spooled_records",
                                  "Records waiting in the spool for the database.")
        spool.add_metric([], v.spooled())
        yield spool
        s = v.latest()
        if s is None:
            return
        es = StateSetMetricFamily("supervisor_engine_state", "The engine's lifecycle state.",
                                  labels=[])
        es.add_metric([], {st.value: s.engine_state is st for st in EngineState})
        yield es
        for field, (name, doc) in SAMPLE_GAUGES.items():
            value = getattr(s, field)
            if value is not None:
                m = GaugeMetricFamily(name, doc)
                m.add_metric([], float(value))
                yield m
        rates = v.rates()
        if rates is not None:
            for field, (name, doc) in RATE_GAUGES.items():
                value = getattr(rates, field)
                if value is not None:
                    m = GaugeMetricFamily(name, doc)
                    m.add_metric([], float(value))
                    yield m

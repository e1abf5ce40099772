"""The supervisor's own Prometheus metrics (prometheus_client), in the service's registry.

Counters are incremented where things happen (the executor); gauges of what the
supervisor sees are read from the newest Sample at scrape time by ``StateCollector``, so
a scrape always shows the latest tick and nothing is updated twice. Names: ``supervisor_``
prefix, base units in names (``_bytes``, ``_seconds``, ``_celsius``, ``_watts``, ``_ratio``),
``_total`` for counters (prometheus.io "Metric and label naming").

``register_process_metrics`` adds ``supervisor_build_info`` and prometheus_client's
process collector (``process_cpu_seconds_total``, ``process_resident_memory_bytes``,
``process_open_fds``, ``process_start_time_seconds``...) and turns the ``_created``
series off (prometheus_client.disable_created_metrics(): a second series per counter that
no alert or panel reads). dashboards/alerts/ holds the alerting rules written on these
names; tests/process/test_alert_rules_promtool.py runs their ``promtool test rules``.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, StateSetMetricFamily
from prometheus_client.registry import Collector

from agent_supervisor import __version__
from agent_supervisor.decide.ladder import LadderState, recent_crashes
from agent_supervisor.policy import Policy
from agent_supervisor.show.incident_kinds import KNOWN_INCIDENTS
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.rates import EngineRates
from agent_supervisor.telemetry.sample import Sample

__all__ = ["SAMPLE_GAUGES", "TRANSITION_CAUSES", "StateCollector", "SupervisorMetrics",
           "register_process_metrics", "transition_cause"]

#: Who moved the ladder, the ``cause`` label of ``supervisor_rung_changes_total``: a
#: guard's finding, an operator's lever (``supervisor step down``, pin), the calm-period
#: schedule (a step up), or start-up (the previous life). Bounded, so every series is
#: created at 0 and an alert rule can leave the operator's own moves out (issue 33: the
#: ``StepDown`` alert fired on an operator's ``supervisor step down``).
TRANSITION_CAUSES = ("guard", "operator", "schedule", "startup")

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
    "engine_cgroup_memory_bytes": ("supervisor_engine_cgroup_memory_bytes",
                                   "Memory charged to the engine container's cgroup."),
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
                                 "Decisions other than hold, by action (advise mode: "
                                 "would_<action>, recorded, not carried out).", ["action"],
                                 registry=registry)
        self.rung_changes = Counter(
            "supervisor_rung_changes_total",
            "Rung changes, by direction (down: to a safer mode, up: to a faster one) and "
            "cause (guard, operator, schedule, startup).", ["direction", "cause"],
            registry=registry)
        self.alerts = Counter("supervisor_alerts_total",
                              "Webhook alerts, by outcome (sent, failed, suppressed).",
                              ["outcome"], registry=registry)
        # Series an alert rule or the dashboard's incidents annotation counts with
        # increase() exist from the first scrape at 0, so the first incident of each kind
        # in a life is an increase too (prometheus.io "Instrumentation: avoid missing
        # metrics"; show/incident_kinds.py).
        for kind, severity in KNOWN_INCIDENTS:
            self.incidents.labels(kind, severity)
        for direction in ("down", "up"):
            for cause in TRANSITION_CAUSES:
                self.rung_changes.labels(direction, cause)


def transition_cause(actor: str) -> str:
    """The ``cause`` label of a transition's ``actor`` (``guard:<name>``, ``operator``,
    ``schedule``, ``startup``): the actor without the guard's name."""
    cause = actor.split(":", 1)[0]
    return cause if cause in TRANSITION_CAUSES else "guard"


def register_process_metrics(registry: CollectorRegistry) -> None:
    """``supervisor_build_info`` (1, labelled with version and Python) and the process
    collector of this process, in ``registry``; the ``_created`` series off for every
    metric of this process (a process-wide switch of prometheus_client)."""
    disable_created_metrics()
    ProcessCollector(registry=registry)
    info = Gauge("supervisor_build_info", "Always 1; the version of the supervisor.",
                 ["version", "python"], registry=registry)
    info.labels(__version__, platform.python_version()).set(1)


@dataclass
class StateView:
    """What the collector reads at scrape time (callables into the live service)."""

    policy: Callable[[], Policy]
    latest: Callable[[], Sample | None]
    rates: Callable[[], EngineRates | None]
    rung: Callable[[], int]
    spooled: Callable[[], int]
    ladder: Callable[[], LadderState] | None = None


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
        if v.ladder is not None:
            yield from _ladder_gauges(v.ladder(), policy, time.monotonic())
        s = v.latest()
        if s is None:
            return
        age = GaugeMetricFamily("supervisor_last_sample_age_seconds",
                                "Seconds since the newest Sample (the tick loop's pulse).")
        age.add_metric([], max(0.0, time.monotonic() - s.t_s))
        yield age
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


def _ladder_gauges(ladder: LadderState, policy: Policy, now_s: float) -> Iterator[object]:
    """The ladder's operator-visible state as gauges (the alert rules read these)."""
    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc)
        g.add_metric([], value)
        return g

    yield gauge("supervisor_gave_up", "1 once the last rung exhausted its start limit "
                "(the service then exits 1).", float(ladder.gave_up))
    yield gauge("supervisor_paused", "1 while an operator paused the ladder.",
                float(ladder.paused))
    yield gauge("supervisor_pinned", "1 while an operator pinned a mode.",
                float(ladder.pinned is not None))
    yield gauge("supervisor_recent_crashes",
                "Crashes of the current rung inside restart.start_limit_interval_seconds.",
                float(len(recent_crashes(ladder, policy, now_s))))
    yield gauge("supervisor_start_limit_burst", "restart.start_limit_burst of the policy.",
                float(policy.restart.start_limit_burst))
    yield gauge("supervisor_calm_seconds", "Seconds since the last warning or rung change.",
                max(0.0, ladder.calm_for(now_s)))
    left = ladder.probation_left(now_s, policy.hysteresis.probation_seconds) or 0.0
    yield gauge("supervisor_probation_seconds_left", "Seconds of probation left after a step "
                "up (all of it until the new engine serves; 0: none).", left)

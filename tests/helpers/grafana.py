"""Metric names a Grafana dashboard's queries use (``metric_names``) and those of them
the supervisor exports (``supervisor_names``)."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from agent_supervisor.gateway.metrics import GatewayMetrics
from agent_supervisor.show.metrics import (
    RATE_GAUGES,
    SAMPLE_GAUGES,
    StateCollector,
    StateView,
    SupervisorMetrics,
)
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.rates import EngineRates
from agent_supervisor.telemetry.sample import Sample
from tests.helpers.policies import fake_engine_policy

#: Sample names a metric family of each type exposes (prometheus_client's exposition);
#: a labelled metric with no children yet exposes none, so they are derived from the type.
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "info": ("_info",),
            "stateset": ("",), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("_sum", "_count", "_created"), "gaugehistogram": ("_bucket",),
            "unknown": ("",)}


#: Words of PromQL (and Grafana's label_values) that look like identifiers but are no
#: metric: aggregation operators, keywords, literals and the functions used with a space.
PROMQL_WORDS = frozenset((
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "limitk", "limit_ratio", "by", "without", "on", "ignoring",
    "group_left", "group_right", "bool", "and", "or", "unless", "offset", "atan2", "inf", "nan",
    "rate", "irate", "increase", "delta", "idelta", "deriv", "changes", "resets",
    "histogram_quantile", "abs", "absent", "absent_over_time", "ceil", "floor", "round", "clamp",
    "clamp_min", "clamp_max", "exp", "ln", "log2", "log10", "sqrt", "sort", "sort_desc", "time",
    "timestamp", "vector", "scalar", "label_replace", "label_join", "avg_over_time",
    "min_over_time", "max_over_time", "sum_over_time", "count_over_time", "last_over_time",
    "quantile_over_time", "stddev_over_time", "present_over_time", "predict_linear",
    "holt_winters", "label_values", "query_result", "metrics",
))


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')


_MATCHERS = re.compile(r"\{[^}]*\}")


_RANGE = re.compile(r"\[[^\]]*\]")


_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


#: A whole identifier (metric names may hold colons) that is not a function call.
_IDENT = re.compile(r"(?<![\w:$.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")


_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", re.S)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a label_values(...) query) reads."""
    if m := _LABEL_VALUES.match(expr):
        expr = m.group(1)
    elif expr.strip().startswith("label_values("):
        return set()                                  # label_values(label): no metric
    for pattern, blank in ((_STRING, '""'), (_MATCHERS, "{}"), (_RANGE, "[]"),
                           (_GROUPING, " ")):
        expr = pattern.sub(blank, expr)
    return {name for name in _IDENT.findall(expr) if name.lower() not in PROMQL_WORDS}


def supervisor_names(tmp_path: Path) -> set[str]:
    """Every sample name the supervisor's /metrics can show: its counters, the gateway's
    metrics and the state collector (fed a Sample and rates with every field known)."""
    registry = CollectorRegistry()
    SupervisorMetrics(registry)
    GatewayMetrics(registry)
    policy = fake_engine_policy(tmp_path)
    sample = Sample(t_s=0.0, engine_state=EngineState.READY,
                    **dict.fromkeys(SAMPLE_GAUGES, 1.0))
    rates = EngineRates(seconds=60.0, **dict.fromkeys(RATE_GAUGES, 1.0))
    registry.register(StateCollector(StateView(lambda: policy, latest=lambda: sample,
                                               rates=lambda: rates, rung=lambda: 0,
                                               spooled=lambda: 0)))
    names: set[str] = set()
    for family in registry.collect():
        names |= {s.name for s in family.samples}
        names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    gauges = {name for name, _ in (*SAMPLE_GAUGES.values(), *RATE_GAUGES.values())}
    assert gauges <= names          # the collector shows every gauge it declares
    return names | gauges

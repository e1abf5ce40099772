"""Parse one vLLM ``/metrics`` scrape into Sample fields. Pure: text in, values out."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from supervisor.errors import MetricsParseError
from supervisor.sense.names import METRICS

__all__ = ["parse_metrics"]


def parse_metrics(text: str, *, url: str = "/metrics") -> dict[str, float | None]:
    """Read the concepts of ``names.METRICS`` out of Prometheus exposition text.

    Returns: one entry per concept (the Sample field name); the value as exposed (vLLM's
    ``_perc`` gauges are already 0-1), aggregated across label sets, or None when no
    alias of it is present.
    Raises: MetricsParseError (``.url``) when prometheus_client cannot parse the text.
    Source: prometheus_client.parser.text_string_to_metric_families.
    """
    found: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                found.setdefault(sample.name, []).append(sample.value)
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"cannot parse {url}: {exc}", url=url) from exc
    values: dict[str, float | None] = {}
    for field, (aliases, how) in METRICS.items():
        series = next((found[name] for name in aliases if name in found), None)
        if series is None:
            values[field] = None
        else:
            values[field] = float(sum(series) if how == "sum" else max(series))
    return values

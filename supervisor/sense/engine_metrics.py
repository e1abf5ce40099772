"""Parse one vLLM ``/metrics`` scrape into Sample fields. Pure: text in, values out."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from supervisor.errors import MetricsParseError
from supervisor.sense.names import METRICS, POSITION_LABEL, SPEC_ACCEPTED_PER_POSITION

__all__ = ["parse_metrics"]

#: Every sample name read, and the family names their ``# HELP``/``# TYPE`` lines use.
_WANTED = {name for aliases, _ in METRICS.values() for name in aliases}
_WANTED.add(SPEC_ACCEPTED_PER_POSITION)


def _family(name: str) -> str:
    for suffix in ("_total", "_count", "_sum", "_bucket", "_created"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


_WANTED_FAMILIES = {_family(n) for n in _WANTED} | _WANTED


def _wanted_lines(text: str) -> str:
    """Only the lines of the series we read (and their metadata).

    A vLLM scrape is about 50 KB (histograms of every latency); prometheus_client's
    parser takes about 8 ms on it, and the tick needs a tenth of the series. Lines are
    kept by exact metric name, so the text handed on is still valid exposition format.
    """
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[2] in _WANTED_FAMILIES:
                keep.append(line)
            continue
        end = len(line)
        for sep in ("{", " "):
            i = line.find(sep)
            if 0 <= i < end:
                end = i
        if line[:end] in _WANTED:
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_metrics(text: str, *, url: str = "/metrics") -> dict[str, object]:
    """Read the concepts of ``names.METRICS`` out of Prometheus exposition text.

    Returns: one entry per concept (the Sample field name); the value as exposed (vLLM's
    ``_perc`` gauges are already 0-1), aggregated across label sets, or None when no
    alias of it is present; plus ``spec_decode_accepted_per_position_total``, a tuple of
    accepted tokens by draft position (summed across engines), or None.
    Raises: MetricsParseError (``.url``) when prometheus_client cannot parse the text.
    Source: prometheus_client.parser.text_string_to_metric_families.
    """
    found: dict[str, list[float]] = {}
    per_position: dict[int, float] = {}
    try:
        for family in text_string_to_metric_families(_wanted_lines(text)):
            for sample in family.samples:
                found.setdefault(sample.name, []).append(sample.value)
                if sample.name == SPEC_ACCEPTED_PER_POSITION:
                    pos = int(sample.labels.get(POSITION_LABEL, "-1"))
                    per_position[pos] = per_position.get(pos, 0.0) + sample.value
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"cannot parse {url}: {exc}", url=url) from exc
    values: dict[str, object] = {}
    positions = sorted(per_position)
    values["spec_decode_accepted_per_position_total"] = (
        tuple(per_position[p] for p in positions)
        if positions and positions == list(range(len(positions))) else None)
    for field, (aliases, how) in METRICS.items():
        series = next((found[name] for name in aliases if name in found), None)
        if series is None:
            values[field] = None
        else:
            values[field] = float(sum(series) if how == "sum" else max(series))
    return values

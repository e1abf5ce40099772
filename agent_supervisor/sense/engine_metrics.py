"""Parse one ``/metrics`` scrape into Sample fields. Pure: text in, values out.

The names come from the engine profile's table (vLLM's ``names.METRICS`` by default,
llama-server's ``profiles.LLAMA_CPP_METRICS``)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from agent_supervisor.errors import MetricsParseError
from agent_supervisor.sense.names import (
    LABEL_SELECT,
    METRICS,
    POSITION_LABEL,
    SPEC_ACCEPTED_PER_POSITION,
    Aggregate,
)

__all__ = ["parse_metrics"]

Table = dict[str, tuple[tuple[str, ...], Aggregate]]


def _wanted(table: Table, per_position: str | None) -> tuple[set[str], set[str]]:
    """Every sample name read, and the family names their ``# HELP``/``# TYPE`` lines use."""
    names = {name for aliases, _ in table.values() for name in aliases}
    if per_position is not None:
        names.add(per_position)
    return names, {_family(n) for n in names} | names


def _family(name: str) -> str:
    for suffix in ("_total", "_count", "_sum", "_bucket", "_created"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


_WANTED, _WANTED_FAMILIES = _wanted(METRICS, SPEC_ACCEPTED_PER_POSITION)
_CACHE: dict[int, tuple[set[str], set[str]]] = {id(METRICS): (_WANTED, _WANTED_FAMILIES)}


def _wanted_lines(text: str, wanted: set[str] = _WANTED,
                  families: set[str] = _WANTED_FAMILIES) -> str:
    """Only the lines of the series we read (and their metadata).

    A vLLM scrape is about 50 KB (histograms of every latency); prometheus_client's
    parser takes about 8 ms on it, and the tick needs a tenth of the series. Lines are
    kept by exact metric name, so the text handed on is still valid exposition format.
    """
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[2] in families:
                keep.append(line)
            continue
        end = len(line)
        for sep in ("{", " "):
            i = line.find(sep)
            if 0 <= i < end:
                end = i
        if line[:end] in wanted:
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_metrics(text: str, *, url: str = "/metrics", table: Table = METRICS,
                  per_position: str | None = SPEC_ACCEPTED_PER_POSITION) -> dict[str, object]:
    """Read the concepts of ``table`` (default vLLM's ``names.METRICS``; an engine
    profile's ``metrics``) out of Prometheus exposition text.

    Returns: one entry per concept (the Sample field name); the value as exposed (vLLM's
    ``_perc`` gauges are already 0-1), aggregated across label sets, or None when no
    alias of it is present; plus ``spec_decode_accepted_per_position_total``, a tuple of
    accepted tokens by draft position (summed across engines), or None.
    Raises: MetricsParseError (``.url``) when prometheus_client cannot parse the text.
    Source: prometheus_client.parser.text_string_to_metric_families.
    """
    if id(table) not in _CACHE:
        _CACHE[id(table)] = _wanted(table, per_position)
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    by_pos: dict[int, float] = {}
    try:
        for family in text_string_to_metric_families(_wanted_lines(text, *_CACHE[id(table)])):
            for sample in family.samples:
                found.setdefault(sample.name, []).append((sample.labels, sample.value))
                if sample.name == per_position:
                    pos = int(sample.labels.get(POSITION_LABEL, "-1"))
                    by_pos[pos] = by_pos.get(pos, 0.0) + sample.value
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"cannot parse {url}: {exc}", url=url) from exc
    values: dict[str, object] = {}
    positions = sorted(by_pos)
    values["spec_decode_accepted_per_position_total"] = (
        tuple(by_pos[p] for p in positions)
        if positions and positions == list(range(len(positions))) else None)
    for field, (aliases, how) in table.items():
        labelled = next((found[name] for name in aliases if name in found), None)
        if labelled is None:
            values[field] = None
            continue
        series = [v for labels, v in labelled if _selected(field, labels)]
        values[field] = float(sum(series) if how == "sum" else max(series, default=0.0))
    return values


def _selected(field: str, labels: dict[str, str]) -> bool:
    """Whether a series with ``labels`` counts toward ``field`` (``names.LABEL_SELECT``)."""
    rule = LABEL_SELECT.get(field)
    if rule is None:
        return True
    label, wanted, keep = rule
    return (labels.get(label) in wanted) is keep

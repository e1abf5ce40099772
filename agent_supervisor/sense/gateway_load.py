"""The hook through which the gateway reports its load to the sensors.

The gateway (a later part) implements ``GatewayLoadSource``; until one is attached, the
Sample's ``gateway_*`` fields read as unknown (None), never 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["GatewayLoad", "GatewayLoadSource", "gateway_fields"]


@dataclass(frozen=True, slots=True)
class GatewayLoad:
    """Requests the gateway holds right now and the prompt tokens they carry."""

    requests_in_flight: int
    requests_queued: int
    prompt_tokens_in_flight: int
    prompt_tokens_queued: int
    repeated_prefix_tokens_total: int | None = None
    """Counters since the gateway started (agent_supervisor/gateway/quality.py)."""
    parser_errors_total: int | None = None
    degenerate_streams_total: int | None = None
    overrun_answers_total: int | None = None
    """Answers counted clearly past their request's ``max_tokens``
    (agent_supervisor/gateway/overrun.py)."""


class GatewayLoadSource(Protocol):
    """Anything that can say what load the gateway holds (None: it cannot tell now)."""

    def gateway_load(self) -> GatewayLoad | None: ...


def gateway_fields(source: GatewayLoadSource | None) -> dict[str, int | None]:
    """The Sample's ``gateway_*`` fields from ``source``; all None without one."""
    load = source.gateway_load() if source is not None else None
    if load is None:
        return dict.fromkeys(("gateway_requests_in_flight", "gateway_requests_queued",
                              "gateway_prompt_tokens_in_flight",
                              "gateway_prompt_tokens_queued",
                              "gateway_repeated_prefix_tokens_total",
                              "gateway_parser_errors_total",
                              "gateway_degenerate_streams_total",
                              "gateway_overrun_answers_total"))
    return {
        "gateway_requests_in_flight": load.requests_in_flight,
        "gateway_requests_queued": load.requests_queued,
        "gateway_prompt_tokens_in_flight": load.prompt_tokens_in_flight,
        "gateway_prompt_tokens_queued": load.prompt_tokens_queued,
        "gateway_repeated_prefix_tokens_total": load.repeated_prefix_tokens_total,
        "gateway_parser_errors_total": load.parser_errors_total,
        "gateway_degenerate_streams_total": load.degenerate_streams_total,
        "gateway_overrun_answers_total": load.overrun_answers_total,
    }

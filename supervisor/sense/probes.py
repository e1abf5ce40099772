"""HTTP probes of the engine: ``/health`` and ``/metrics``. I/O lives here, parsing does not.

vLLM's ``/health`` returns 503 only when the engine process is dead; a hung engine still
answers 200 (vllm PR #24897, issue #39863), so a 200 proves little and a slow answer
under heavy load proves nothing. These probes report what they saw; the guards judge.
"""

from __future__ import annotations

import time

import httpx

from supervisor.errors import ScrapeError, ScrapeTimeout
from supervisor.sense.names import HEALTH_PATH, METRICS_PATH

__all__ = ["probe_health", "scrape_metrics"]


async def probe_health(
    client: httpx.AsyncClient, base_url: str, timeout_seconds: float
) -> tuple[int | None, float | None]:
    """``GET {base_url}/health``.

    Returns: (HTTP status, latency in seconds), or (None, None) when it did not answer
    within ``timeout_seconds`` or the connection was refused.
    """
    t0 = time.monotonic()
    try:
        resp = await client.get(base_url + HEALTH_PATH, timeout=timeout_seconds)
    except httpx.HTTPError:
        return None, None
    return resp.status_code, time.monotonic() - t0


async def scrape_metrics(client: httpx.AsyncClient, base_url: str, timeout_seconds: float) -> str:
    """``GET {base_url}/metrics`` and return the exposition text.

    Raises: ScrapeTimeout past ``timeout_seconds``; ScrapeError on refusal or a non-200.
    """
    url = base_url + METRICS_PATH
    try:
        resp = await client.get(url, timeout=timeout_seconds)
    except httpx.TimeoutException as exc:
        raise ScrapeTimeout(f"{url} did not answer within {timeout_seconds} s", url=url) from exc
    except httpx.HTTPError as exc:
        raise ScrapeError(f"{url}: {exc.__class__.__name__}: {exc}", url=url) from exc
    if resp.status_code != 200:
        raise ScrapeError(f"{url} answered {resp.status_code}", url=url)
    return resp.text

"""HTTP probes of the engine: ``/health`` and ``/metrics``. I/O lives here, parsing does not.

vLLM's ``/health`` returns 503 only when the engine process is dead; a hung engine still
answers 200 (vllm PR #24897, issue #39863), so a 200 proves little and a slow answer
under heavy load proves nothing. These probes report what they saw; the guards judge.
"""

from __future__ import annotations

import time

import httpx

from agent_supervisor.errors import ScrapeError, ScrapeTimeout
from agent_supervisor.sense.names import COMPLETIONS_PATH, HEALTH_PATH, METRICS_PATH, MODELS_PATH

__all__ = ["CANARY_PROMPT", "canary", "complete", "engine_version", "probe_health",
           "probe_loop", "scrape_metrics", "served_model"]


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


async def engine_version(client: httpx.AsyncClient, base_url: str,
                         timeout_seconds: float) -> str | None:
    """``GET {base_url}/version``: vLLM's version string (``{"version": "0.32.0"}``,
    vllm/entrypoints/serve/instrumentator/basic.py ``show_version``), or None when the
    server does not answer it (an older or a different server)."""
    try:
        resp = await client.get(base_url + "/version", timeout=timeout_seconds)
        value = resp.json().get("version") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return value[:64] if isinstance(value, str) else None


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


async def probe_loop(client: httpx.AsyncClient, base_url: str, path: str,
                     timeout_seconds: float) -> tuple[bool | None, float | None, str | None]:
    """``GET {base_url}{path}``: a request only the engine's own loop answers (an engine
    profile's ``loop_probe_path``, llama-server's ``/slots``).

    Returns: (True, latency, the body of a 200 or None) for any HTTP answer, (False,
    None, None) when none came within ``timeout_seconds``, (None, None, None) when the
    connection failed (no verdict on the loop).
    """
    t0 = time.monotonic()
    try:
        resp = await client.get(base_url + path, timeout=timeout_seconds)
    except httpx.TimeoutException:
        return False, None, None
    except httpx.HTTPError:
        return None, None, None
    return True, time.monotonic() - t0, resp.text if resp.status_code == 200 else None


#: The canary's whole request: one token from a one-word prompt. Cheap enough to send
#: to a loaded engine; it only goes out when progress already looks stalled.
CANARY_PROMPT = "ping"


async def served_model(
    client: httpx.AsyncClient, base_url: str, timeout_seconds: float
) -> str | None:
    """The first model id of ``GET /v1/models`` (OpenAI shape), or None if unreadable."""
    try:
        resp = await client.get(base_url + MODELS_PATH, timeout=timeout_seconds)
        data = resp.json()["data"]
        return str(data[0]["id"]) if resp.status_code == 200 and data else None
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return None


async def canary(
    client: httpx.AsyncClient, base_url: str, model: str, timeout_seconds: float
) -> tuple[bool, float, str | None]:
    """Send one tiny completion (``max_tokens`` 1) and wait up to ``timeout_seconds``.

    Returns: (answered 200 with a choice, seconds taken, error text or None). A hung
    engine keeps the request and the timeout fires; a busy one answers late but answers.
    """
    body = {"model": model, "prompt": CANARY_PROMPT, "max_tokens": 1, "temperature": 0}
    text, took, error = await complete(client, base_url, body, timeout_seconds)
    return text is not None, took, error


async def complete(client: httpx.AsyncClient, base_url: str, body: dict[str, object],
                   timeout_seconds: float) -> tuple[str | None, float, str | None]:
    """``POST {base_url}/v1/completions`` with ``body`` (the canary's and the golden
    canary's one HTTP path), waiting up to ``timeout_seconds``.

    Returns: (the first choice's ``text``, or None when there was no answer with a choice;
    seconds taken; error text or None).
    """
    t0 = time.monotonic()
    try:
        resp = await client.post(base_url + COMPLETIONS_PATH, json=body, timeout=timeout_seconds)
    except httpx.TimeoutException:
        return None, time.monotonic() - t0, f"no answer within {timeout_seconds:g} s"
    except httpx.HTTPError as exc:
        return None, time.monotonic() - t0, f"{exc.__class__.__name__}: {exc}"
    took = time.monotonic() - t0
    if resp.status_code != 200:
        return None, took, f"HTTP {resp.status_code}"
    try:
        text = resp.json()["choices"][0].get("text")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None, took, "answer without choices"
    return (text if isinstance(text, str) else ""), took, None

"""The fleet's own request shapes as a calibration profile (``calibrate --profiles fleet``).

The gateway keeps the last ``gateway.sample_request_shapes`` requests' shapes when the
operator opts in (agent_supervisor/gateway/quality.py ``request_shape``: estimated prompt
tokens, max_tokens asked, turns, tools, stream; never text). ``fleet_profile`` turns them
into a ``Profile`` of the same proportions: opening asks of the median prompt length
(neutral filler text, since no content is kept), follow-ups for multi-turn fleets, and
the median answer length asked for.
"""

from __future__ import annotations

import statistics
from typing import Any

import httpx

from agent_supervisor.load.profiles import Profile
from agent_supervisor.policy import Policy
from agent_supervisor.policy.urls import gateway_url, gateway_verify

__all__ = ["FLEET", "fetch_shapes", "fleet_profile"]

FLEET = "fleet"
#: Answer length when the fleet's requests do not say (vLLM's default is the context).
DEFAULT_MAX_TOKENS = 256
_FILLER = ("Read the module, list its functions, explain what each one returns and "
           "which errors it raises. ")


def fetch_shapes(policy: Policy, timeout_seconds: float = 5.0) -> list[dict[str, Any]]:
    """The shapes the running gateway kept. Raises ValueError naming the setting when
    the gateway is not reachable or keeps none (the operator has not opted in)."""
    url = gateway_url(policy, "/gateway/shapes")      # https with gateway.tls (issue 33)
    try:
        data = httpx.get(url, timeout=timeout_seconds, verify=gateway_verify(policy)).json()
    except (httpx.HTTPError, OSError, ValueError) as exc:
        raise ValueError(f"the fleet profile needs the running gateway at {url}: "
                         f"{exc.__class__.__name__}") from exc
    if not data.get("enabled"):
        raise ValueError("the fleet profile needs gateway.sample_request_shapes > 0 in the "
                         "policy (an opt-in: the gateway then keeps request shapes, never "
                         "their text)")
    shapes = data.get("shapes") or []
    if not shapes:
        raise ValueError(f"the gateway at {url} has seen no request yet")
    return list(shapes)


def fleet_profile(shapes: list[dict[str, Any]], context_tokens: int) -> Profile:
    """A profile shaped like ``shapes``: prompts of their median length (at most half the
    context), answers of their median ``max_tokens``, follow-ups when they are
    multi-turn."""
    prompt = int(statistics.median(int(s.get("prompt_tokens") or 1) for s in shapes))
    asked = [int(s["max_tokens"]) for s in shapes if isinstance(s.get("max_tokens"), int)]
    answer = int(statistics.median(asked)) if asked else DEFAULT_MAX_TOKENS
    answer = max(16, min(answer, context_tokens // 4))
    prompt = max(8, min(prompt, context_tokens // 2 - answer))
    words = _FILLER.split()
    n = prompt * 3 // 4                    # ~0.75 words a token
    text = " ".join(words[i % len(words)] for i in range(max(n, 4)))
    multi = statistics.median(int(s.get("turns") or 1) for s in shapes) > 2
    follow = ("Continue with the next step.", "Now check the result.") if multi else ()
    return Profile(FLEET, (text,), follow, answer)

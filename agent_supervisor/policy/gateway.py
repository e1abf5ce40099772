"""Policy sections for the gateway: its limits per mode, agents' keys, and its own
listener, allow-list, bounds and stream resumption (agent_supervisor/gateway/).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from agent_supervisor.policy.base import (
    Bytes,
    Count,
    CountOrZero,
    Delay,
    PolicyModel,
    Seconds,
    Tokens,
)

__all__ = ["FALLBACK_APIS", "ApiKey", "Fallback", "GatewayLimits", "GatewaySpec"]


class GatewayLimits(PolicyModel):
    """Admission limits the gateway applies in a mode (None: no limit)."""

    max_concurrency: Count | None = None
    """Requests in flight to the engine at most; more wait in the queue. None: no limit.
    Shedding scales it by ``hysteresis.shed_factor``."""
    max_queue: CountOrZero | None = None
    """Requests waiting for a slot at most; more get 429 with Retry-After (0: none wait).
    None: no limit. Shedding scales it like ``max_concurrency``."""
    queue_timeout_seconds: Seconds = 60.0
    """A request waits for a slot at most this long, then gets 429 with Retry-After."""
    max_prompt_tokens: Tokens | None = None
    """A prompt of more tokens is refused with 400 before it reaches the engine. None: no
    limit."""
    max_tokens_in_flight: Tokens | None = None
    """Budget of prompt tokens in flight (the load-budget guard sheds above it)."""


class ApiKey(PolicyModel):
    """One agent's key, stored as its SHA-256 hex digest (never the key itself)."""

    name: Annotated[str, Field(min_length=1)]
    """The agent's name: the label its requests carry in the gateway's logs and metrics (not
    a secret)."""
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """SHA-256 of the key as 64 lowercase hex digits (``printf %s KEY | sha256sum``); the
    key itself is never stored."""
    max_concurrency: Count | None = None
    """This key's generation requests in the gateway at once (queued or in flight) at
    most; one more gets 429 with Retry-After at once, whatever the mode's limits leave.
    None: only the mode's limits."""
    requests_per_minute: Count | None = None
    """This key's generation requests admitted in any 60 s at most; more get 429 with
    Retry-After (the seconds until the oldest leaves the minute). None: no rate limit."""


class GatewayTls(PolicyModel):
    """The gateway's TLS certificate (agents then use ``https://HOST:PORT/v1``)."""

    certificate_file: Annotated[str, Field(min_length=1)]
    """PEM certificate chain, leaf first (relative paths: to the policy file's
    directory). Read again at a policy reload (``supervisor policy reload``) and by a
    gateway process's successor after SIGHUP: new connections get the new certificate."""
    key_file: Annotated[str, Field(min_length=1)]
    """PEM private key of that certificate, unencrypted, readable by the service user
    only (relative paths: to the policy file's directory)."""


#: The generation APIs a fallback may speak (``gateway.fallbacks[].apis``), each one path:
#: ``chat`` /v1/chat/completions, ``completions`` /v1/completions, ``responses``
#: /v1/responses, ``messages`` /v1/messages (Anthropic).
FallbackApi = Literal["chat", "completions", "responses", "messages"]
FALLBACK_APIS: tuple[FallbackApi, ...] = ("chat", "completions", "responses", "messages")


class Fallback(PolicyModel):
    """Another upstream the gateway sends requests to while the local engine is held
    past ``gateway.failover_after_seconds`` (issue 31 item 5): another box running this
    supervisor, or any OpenAI- or Anthropic-compatible endpoint
    (agent_supervisor/gateway/failover.py). Exactly one of ``api_key_env`` and
    ``api_key_file`` gives its key; the key is never written to a log or an error."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")]
    """The fallback's name: the ``X-Supervisor-Served-By`` header of the answers it
    serves, the ``fallback`` label of ``supervisor_gateway_failover_requests_total``
    and the record's (lowercase letters, digits, ``.``, ``_``, ``-``)."""
    url: Annotated[str, Field(min_length=1, max_length=2048)]
    """Its root, ``http://`` or ``https://`` host, port and an optional prefix, without
    ``/v1``: the request's own path (``/v1/chat/completions``) is appended
    (``https://api.example.com`` -> ``https://api.example.com/v1/chat/completions``)."""
    api_key_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None
    """The environment variable holding its key (the gateway's environment)."""
    api_key_file: Annotated[str, Field(min_length=1)] | None = None
    """A file holding its key, first line (relative paths: to the policy file's
    directory; read at start and at each policy reload)."""
    model: Annotated[str, Field(min_length=1)] | None = None
    """The model name sent to it instead of the request's (None: the request's)."""
    apis: list[FallbackApi] = list(FALLBACK_APIS)
    """The APIs it speaks (``chat``, ``completions``, ``responses``, ``messages``); a
    request of another one keeps waiting for the local engine. Sent with ``Authorization:
    Bearer KEY``, or ``x-api-key: KEY`` for ``messages`` (Anthropic's header)."""

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        import urllib.parse

        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be an http:// or https:// URL with a host, not {url!r}")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError("must have no query, fragment or user:password (the key goes "
                             "in api_key_env or api_key_file)")
        try:
            parts.port  # noqa: B018  (raises on a bad port)
        except ValueError as exc:
            raise ValueError(f"has a bad port: {exc}") from None
        return url.rstrip("/")

    @field_validator("apis")
    @classmethod
    def _apis(cls, apis: list[str]) -> list[str]:
        if not apis:
            raise ValueError("must name at least one of " + ", ".join(FALLBACK_APIS))
        return apis

    @model_validator(mode="after")
    def _one_key(self) -> Fallback:
        if (self.api_key_env is None) == (self.api_key_file is None):
            raise ValueError(f"fallback {self.name!r}: give exactly one of api_key_env "
                             "and api_key_file (its key)")
        return self


class GatewaySpec(PolicyModel):
    """The gateway agents talk to instead of the engine (an OpenAI-compatible proxy)."""

    enabled: bool = True
    """Run the gateway. False: agents talk to the engine directly, and nothing holds their
    requests across a restart or a switch."""
    host: str = "127.0.0.1"
    """Address the gateway listens on (loopback by default)."""
    port: Annotated[int, Field(ge=1, le=65535)] = 8080
    """The gateway's port: agents' OpenAI base URL is ``http://HOST:PORT/v1``."""
    auth: Literal["passthrough", "keys"] = "passthrough"
    """``passthrough``: the client's Authorization header goes to the engine as is.
    ``keys``: only the keys listed in ``api_keys`` are admitted (one fleet cannot use
    another's box); the engine then gets ``upstream_api_key_env``'s key, if set."""
    api_keys: list[ApiKey] = []
    """The keys admitted under ``auth: keys`` (required then), each with the agent's
    name."""
    upstream_api_key_env: str | None = None
    """Under ``auth: keys``: the environment variable whose value the gateway sends the
    engine as ``Authorization: Bearer`` (the engine's own key). None: no key sent."""
    drain_timeout_seconds: Delay = 60.0
    """At a planned switch, in-flight requests get this long to finish before the stop."""
    hold_timeout_seconds: Seconds = 600.0
    """A request queued while the engine is switched waits at most this long."""
    upstream_timeout_seconds: Seconds = 600.0
    """Longest wait for the engine's next byte (a long generation streams; a long
    non-streaming completion only answers at the end)."""
    extra_paths: list[Annotated[str, Field(pattern=r"^/[A-Za-z0-9_\-/]*[A-Za-z0-9_\-]$")]] = []
    """Paths forwarded besides the gateway's allow-list (agent_supervisor/gateway/paths.py), e.g.
    ``/v1/chat/completions/render``. Admin paths of the engine are refused even here."""
    max_connections: Count = 512
    """Open client connections at most (more are closed at once); the gateway also keeps
    below half the process's ``RLIMIT_NOFILE`` so the admin API and the engine keep fds."""
    max_header_bytes: Annotated[Bytes, Field(ge=1024)] = 65536
    """A request's line and headers at most (bytes); more gets 431 and the connection
    closed (nginx's ``large_client_header_buffers`` is 4 x 8 KiB)."""
    header_timeout_seconds: Seconds = 10.0
    """A request's headers must arrive within this long of its first byte (or of the
    connection); else the connection is closed (nginx's ``client_header_timeout``: 60)."""
    max_body_bytes: Annotated[Bytes, Field(ge=1)] = 32 * 1024 * 1024
    """A request body at most (bytes; 413 in the caller's API shape). 32 MiB holds a
    long-context prompt with images; nginx's ``client_max_body_size`` default is 1 MiB."""
    body_timeout_seconds: Seconds = 60.0
    """A request's body must arrive within this long of the end of its headers, however
    it trickles (408, closed; nginx's ``client_body_timeout`` is 60 s between reads)."""
    idle_timeout_seconds: Seconds = 5.0
    """A kept-alive connection with no new request for this long is closed, whatever
    blank lines come meanwhile (nginx's ``keepalive_timeout``: 75; vLLM's own: 5)."""
    write_timeout_seconds: Seconds = 30.0
    """A client that takes none of what waits to be sent to it for this long is cut off,
    which ends its request and frees its slot (nginx's ``send_timeout``: 60)."""
    max_held_requests: CountOrZero = 1024
    """Requests queued while the engine is switched at most (then 429)."""
    max_queued_bytes: Bytes = 256 * 1024 * 1024
    """Bodies of all queued requests together at most (bytes; then 429)."""
    resume: bool = True
    """Continue a chat or text completion stream cut by an engine crash on the next
    engine, from what was sent (agent_supervisor/gateway/resume/)."""
    degenerate_repeat_units: Annotated[Count, Field(ge=8)] = 256
    """An answer ending in one unit of at most 16 characters (a token) repeated this many
    times, not asked for by the prompt, is degenerate: the ``corrupted_output`` guard's
    evidence (token 0 after NaN logits until ``max_tokens``: vllm #55766)."""
    end_overrun_answers: bool = True
    """End a stream clearly past its request's ``max_tokens`` (an error event in the
    caller's API shape; llama-server after a context shift: ggml-org/llama.cpp #25026).
    Counted and recorded either way (``gateway_overrun_answers_total``)."""
    overrun_margin_tokens: Annotated[int, Field(ge=0, le=1_000_000)] = 32
    """Tokens counted past ``max_tokens`` before an answer is past it. The gateway counts
    one token per streamed event (or the engine's ``usage`` when higher): a low count
    (speculation sends several tokens an event), so the margin covers the engine's own
    end of stream events, not the count."""
    overrun_margin_ratio: Annotated[float, Field(ge=0, le=10)] = 0.1
    """And this fraction of ``max_tokens`` on top (0.1: 52 more for 512)."""
    sample_request_shapes: Annotated[int, Field(ge=0, le=100_000)] = 0
    """Opt-in: keep the last N requests' shapes (estimated prompt tokens, max_tokens,
    turns, tools, stream: numbers only, never text) at ``/gateway/shapes`` for
    ``supervisor calibrate --profiles fleet``. 0: none kept."""
    max_resumes_per_request: CountOrZero = 2
    """Crashes one stream may be carried across; the next ends it with an error event."""
    orphan_timeout_seconds: Seconds | None = None
    """A gateway its supervisor started (``--owner supervisor``) that hears nothing from
    any supervisor on its control socket for this long drains and exits. None: it waits
    for one to attach again however long it takes (a supervisor restarted by systemd
    does within seconds). Whatever this says, such a gateway drains and exits once its
    control socket's path is gone or another file (the state directory was removed: no
    supervisor can reach it again); systemd's socket-activated gateway does neither."""
    model_aliases: dict[Annotated[str, Field(min_length=1)],
                        Annotated[str, Field(min_length=1)]] = {}
    """Other names agents may ask for, each mapped to a name the engine serves (``{gpt-4o:
    qwen3-coder}``): a generation request whose ``model`` is an alias is forwarded with
    the served name, and ``/v1/models`` lists each alias beside its target. The answer's
    ``model`` stays what the engine says (agent_supervisor/gateway/models.py)."""
    cors_allow_origins: list[Annotated[str, Field(pattern=r"^(\*|https?://[^/\s]+)$")]] = []
    """Browser origins allowed to call the gateway (``https://app.example.com``, scheme,
    host and port as the browser's ``Origin`` header says; ``*``: any). A preflight
    (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) from one is
    answered 204 by the gateway, without a key; answers to it carry
    ``Access-Control-Allow-Origin``. Other origins get no CORS headers. []: no CORS."""
    tls: GatewayTls | None = None
    """Serve HTTPS with this certificate and key instead of plain HTTP. None: plain HTTP
    (keep ``host`` on loopback then, or put a TLS proxy in front). Turning it on or off
    needs a gateway restart; a reload re-reads the files."""
    fallbacks: list[Fallback] = []
    """Upstreams tried in order while the local engine is held (starting, restarting,
    a reboot required) longer than ``failover_after_seconds``: a generation request held
    that long goes to the first that answers, and new ones go straight there until the
    engine serves again (agent_supervisor/gateway/failover.py). Never a stream already
    coming from the local engine. []: requests wait for the local engine."""
    failover_after_seconds: Seconds = 30.0
    """How long the local engine may be held before requests go to ``fallbacks``."""

    @model_validator(mode="after")
    def _fallback_names(self) -> GatewaySpec:
        names = [f.name for f in self.fallbacks]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"fallbacks: each name once; {', '.join(twice)} more than once")
        return self

"""The gateway's address as the supervisor's own clients reach it (issue 33).

``gateway.tls`` makes the gateway serve HTTPS only: a plain ``http://`` request to it is
not answered (the TLS handshake fails), so every place that builds the gateway's URL from
the policy (``supervisor status``'s gateway line, ``calibrate --profiles fleet`` reading
``/gateway/shapes``) takes the scheme from here, and a client of the supervisor's own
verifies the certificate the policy names.
"""

from __future__ import annotations

import ssl

from agent_supervisor.policy.model import Policy

__all__ = ["gateway_url", "gateway_verify"]

_ANY = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}


def gateway_url(policy: Policy, path: str = "") -> str:
    """``https://HOST:PORT`` + ``path`` with ``gateway.tls``, else ``http://``; a wildcard
    bind address (``0.0.0.0``, ``::``) becomes the loopback address a local client uses."""
    spec = policy.gateway
    scheme = "https" if spec.tls is not None else "http"
    host = _ANY.get(spec.host, f"[{spec.host}]" if ":" in spec.host else spec.host)
    return f"{scheme}://{host}:{spec.port}{path}"


def gateway_verify(policy: Policy) -> ssl.SSLContext | bool:
    """What a local client of the gateway verifies: with ``gateway.tls``, exactly the
    certificate chain the policy names (it is the trust anchor, leaf included:
    ``VERIFY_X509_PARTIAL_CHAIN``), without a host name check (the client dials the
    bind or loopback address, which the certificate need not name; pinning the
    certificate is the stronger check). Without TLS: True (httpx's default).
    Raises: OSError when the certificate file cannot be read (ssl.SSLError included)."""
    tls = policy.gateway.tls
    if tls is None:
        return True
    context = ssl.create_default_context(cafile=str(policy.resolve(tls.certificate_file)))
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    context.check_hostname = False
    return context

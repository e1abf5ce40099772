"""The gateway's TLS (issue 33): ``gateway.tls: {certificate_file, key_file}``, reloadable.

The GB10 policies bind the gateway to ``0.0.0.0`` with agents' keys; without TLS those
keys cross the network in the clear. uvicorn builds the listener's ``ssl.SSLContext``
from the two PEM files (``ssl_certfile``/``ssl_keyfile``: uvicorn/config.py
``create_ssl_context``) and hands it to ``loop.create_server``; a reload loads the files
again into that same live context (``SSLContext.load_cert_chain``: every handshake after
it presents the new certificate, connections already open keep theirs), so a renewed
certificate (certbot, an internal CA's short-lived ones) needs no restart and cuts no
agent. The files are first loaded into a scratch context: a bad pair is refused with the
reason and the certificate in use stays. Turning TLS on or off changes the listener,
which a reload cannot (the gateway process's successor after SIGHUP can).
"""

from __future__ import annotations

import ssl
from typing import Any

from agent_supervisor.policy import Policy

__all__ = ["reload_tls", "tls_options"]


def _files(policy: Policy) -> tuple[str, str] | None:
    tls = policy.gateway.tls
    if tls is None:
        return None
    return str(policy.resolve(tls.certificate_file)), str(policy.resolve(tls.key_file))


def tls_options(policy: Policy) -> dict[str, Any]:
    """``uvicorn.Config`` arguments for the gateway's listener ({} without TLS)."""
    files = _files(policy)
    return {} if files is None else {"ssl_certfile": files[0], "ssl_keyfile": files[1]}


def reload_tls(live: ssl.SSLContext | None, policy: Policy) -> str | None:
    """Load ``policy``'s certificate and key into the listener's ``live`` context (None:
    it serves plain HTTP); why it was refused, or None. Without TLS on either side:
    nothing to do."""
    files = _files(policy)
    if (files is None) != (live is None):
        return ("gateway.tls cannot be turned on or off while the gateway runs: restart it "
                "(SIGHUP hands its sockets to a new gateway process)")
    if files is None or live is None:
        return None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(*files)
    except (OSError, ValueError) as exc:          # ssl.SSLError is an OSError
        return f"gateway.tls: {files[0]}, {files[1]}: {exc}"
    live.load_cert_chain(*files)
    return None

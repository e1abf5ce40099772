"""The gateway's uvicorn-facing code: what it builds on uvicorn's private parts.

- ``connections.py``: ``GatewayProtocol``, a subclass of uvicorn's private
  ``HttpToolsProtocol`` (through agent_supervisor/serve_limits.py's bounded protocol, which
  every listener uses): a client that leaves cancels its request; the response head is
  coalesced with what follows; the client's transport is put in the scope.
- ``responses.py``: the gateway's answers as ASGI messages, and a stream's pieces written to
  that transport in HTTP/1.1 chunked framing, as uvicorn's ``send`` would.
- ``tls.py``: the listener's ``uvicorn.Config`` TLS arguments and their reload.

uvicorn is pinned to the tested range in pyproject.toml; tests/unit/test_uvicorn_surface.py
checks that every private attribute used here exists in the installed uvicorn.
"""

"""Issue 30 item 2: the gateway's listeners subclass uvicorn's private ``HttpToolsProtocol``
(agent_supervisor/serve_limits.py, gateway/listener/connections.py). This test reads those classes'
source, finds every ``self.<name>`` they read or override that they do not define
themselves, and checks that the installed uvicorn's protocol has each, on a real
connection (a socket pair accepted by the event loop); and that every attribute read of
uvicorn's ``RequestResponseCycle`` exists on a real cycle. Run by ``make test`` (the lock's
uvicorn) and ``make test-floors`` (the floor's), it says when a uvicorn inside the declared
range lacks what the gateway relies on."""

from __future__ import annotations

import ast
import asyncio
import inspect
import socket
from pathlib import Path

import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from agent_supervisor import serve_limits
from agent_supervisor.gateway.listener import connections

OURS = (serve_limits.BoundedHttpToolsProtocol, connections.GatewayProtocol)


def _reads(cls: type) -> tuple[set[str], set[str]]:
    """(``self.<name>`` read in ``cls``'s own source, names ``cls`` defines itself)."""
    (body,) = ast.parse(inspect.getsource(cls)).body
    assert isinstance(body, ast.ClassDef)
    read: set[str] = set()
    defined: set[str] = set()
    for node in ast.walk(body):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "self":
            (defined if isinstance(node.ctx, ast.Store) else read).add(node.attr)
    for node in body.body:                      # the class's own methods and attributes
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}
    return read, defined


def _uvicorn_names() -> set[str]:
    """What our subclasses take from uvicorn: read and not defined by any of ours, or
    overridden (a method of ours that uvicorn's class also has is a hook it must call)."""
    read: set[str] = set()
    defined: set[str] = set()
    for cls in OURS:
        r, d = _reads(cls)
        read |= r
        defined |= d
    overridden = {n for cls in OURS for n, v in vars(cls).items()
                  if inspect.isfunction(v) and not n.startswith("_") and n != "close_asked"}
    return (read - defined) | overridden


def _cycle_reads() -> set[str]:
    names: set[str] = set()
    for module in (serve_limits, connections):
        for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "cycle":
                names.add(node.attr)
    return names


async def _connected() -> tuple[HttpToolsProtocol, socket.socket]:
    config = Config(app=lambda scope, receive, send: None, http="httptools", lifespan="off")
    config.load()
    proto = HttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    ours, theirs = socket.socketpair()
    await asyncio.get_running_loop().connect_accepted_socket(lambda: proto, ours)
    return proto, theirs


async def test_issue_30_uvicorn_has_every_private_name_the_gateway_uses() -> None:
    names = _uvicorn_names()
    assert {"cycle", "connections", "loop", "on_headers_complete"} <= names, \
        f"the scanner missed names it must find: {sorted(names)}"
    proto, peer = await _connected()
    try:
        missing = sorted(n for n in names if not hasattr(proto, n))
    finally:
        proto.transport.close()
        peer.close()
    assert not missing, f"uvicorn {uvicorn.__version__}'s HttpToolsProtocol lacks {missing}"


def test_issue_30_uvicorn_cycle_has_every_field_the_gateway_reads() -> None:
    names = _cycle_reads()
    assert {"response_complete", "scope"} <= names
    params = inspect.signature(RequestResponseCycle.__init__).parameters
    source = inspect.getsource(RequestResponseCycle.__init__)
    missing = sorted(n for n in names if f"self.{n}" not in source and n not in params)
    assert not missing, f"uvicorn {uvicorn.__version__}'s RequestResponseCycle lacks {missing}"

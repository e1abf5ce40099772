"""``AppServer``: an ASGI app served by uvicorn inside the supervisor's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

import uvicorn

from agent_supervisor.errors import ListenError
from agent_supervisor.serve_limits import ListenerLimits, bounded_protocol

__all__ = ["AppServer"]

logger = logging.getLogger(__name__)


class AppServer:
    """Serve ``app`` on ``host:port`` as a task of the running loop.

    uvicorn's own signal capture is disabled: the service owns SIGTERM and SIGINT (it
    must drain and stop the engine before anything else goes away). Every connection is
    bounded by ``limits`` (agent_supervisor/serve_limits.py; issue 34: the admin API and
    the node agent were plain uvicorn, and a 200 MiB header grew them by hundreds of MiB).
    """

    def __init__(self, app: Any, host: str, port: int, *, name: str,
                 limits: ListenerLimits | None = None, **options: Any) -> None:
        """``limits``: the connection bounds (default: ``ListenerLimits()``, the admin
        API's and the node agent's); ``options``: more ``uvicorn.Config`` arguments (the
        gateway's protocol class as ``http``, made with its own limits)."""
        self.name = name
        limits = limits or ListenerLimits()
        options.setdefault("http", bounded_protocol(limits))
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                access_log=False, lifespan="off",
                                timeout_keep_alive=int(limits.idle_timeout_seconds) + 1,
                                **{"timeout_graceful_shutdown": 5, **options})
        self.server = uvicorn.Server(config)
        self.server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
        self.host, self.port = host, port
        self._task: asyncio.Task[None] | None = None

    async def _serve(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's ``serve``, its bind failure as ListenError.

        uvicorn turns a bind error into ``sys.exit(3)`` (STARTUP_FAILURE) inside the
        task; asyncio re-raises a SystemExit from a task out of the event loop itself,
        so it must never leave this coroutine (issue 18: the service exited 3 without
        its shutdown, and the next life recorded a false unclean stop).
        """
        try:
            await self.server.serve(sockets=sockets)
        except SystemExit as exc:
            raise ListenError(self.name, self.host, self.port) from exc

    async def start(self, sockets: list[socket.socket] | None = None) -> None:
        """Return once listening. ``sockets``: listening sockets to serve on instead of
        binding ``host:port`` (systemd's socket activation, a predecessor's hand-over).
        Raises ListenError (an OSError) when the port cannot be bound."""
        self._task = asyncio.get_running_loop().create_task(self._serve(sockets))
        while not self.server.started:
            if self._task.done():
                self._task.result()           # raises ListenError, or what uvicorn raised
                raise ListenError(self.name, self.host, self.port, "uvicorn stopped")
            await asyncio.sleep(0.02)

    def stop_accepting(self) -> None:
        """Close the listening sockets (this process's copies: a successor that holds
        the same sockets goes on accepting); open connections stay."""
        for server in getattr(self.server, "servers", []):
            server.close()

    @property
    def open_connections(self) -> int:
        """Client connections open now."""
        return len(self.server.server_state.connections)

    async def stop(self) -> None:
        """Stop serving (open connections get uvicorn's graceful timeout)."""
        self.server.should_exit = True
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

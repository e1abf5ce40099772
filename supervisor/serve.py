"""``AppServer``: an ASGI app served by uvicorn inside the supervisor's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import uvicorn

__all__ = ["AppServer"]

logger = logging.getLogger(__name__)


class AppServer:
    """Serve ``app`` on ``host:port`` as a task of the running loop.

    uvicorn's own signal capture is disabled: the service owns SIGTERM and SIGINT (it
    must drain and stop the engine before anything else goes away).
    """

    def __init__(self, app: Any, host: str, port: int, *, name: str) -> None:
        self.name = name
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                access_log=False, lifespan="off", timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
        self.host, self.port = host, port
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Return once listening. Raises OSError when the port cannot be bound."""
        self._task = asyncio.get_running_loop().create_task(self.server.serve())
        while not self.server.started:
            if self._task.done():
                # uvicorn turns a bind error into sys.exit(STARTUP_FAILURE).
                try:
                    self._task.result()
                except SystemExit as exc:
                    raise OSError(f"{self.name} could not listen on {self.host}:{self.port} "
                                  "(address in use?)") from exc
                raise OSError(f"{self.name} could not listen on {self.host}:{self.port}")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        """Stop serving (open connections get uvicorn's graceful timeout)."""
        self.server.should_exit = True
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

"""Alert test pieces: ``Receiver`` (a webhook endpoint in a thread that records bodies and
fails the first ``fail`` posts), ``incident()`` (a critical Incident) and ``STEP`` (a rung
Transition) to send."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agent_supervisor.act.incident import Incident, Transition
from tests.helpers.ports import free_port
from tests.helpers.waiting import until  # noqa: F401  (moved; importers use tests.helpers)


class Receiver:
    """A webhook endpoint that records bodies and fails the first ``fail`` posts."""

    def __init__(self, fail: int = 0) -> None:
        self.bodies: list[dict] = []
        self.fail = fail
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if outer.fail > 0:
                    outer.fail -= 1
                    self.send_response(500)
                else:
                    outer.bodies.append(body)
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                return

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def incident(kind: str = "engine_core_died", severity: str = "critical") -> Incident:
    return Incident(kind=kind, severity=severity, started_at=datetime.now(UTC),
                    action="restart", explanation="EngineCore died", mode="mtp2", rung=0)


STEP = Transition(at=datetime.now(UTC), from_mode="mtp2", to_mode="mtp1", from_rung=0,
                  to_rung=1, reason="2 crashes", actor="guard:engine_dead")

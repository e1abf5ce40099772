"""The supervisor's exceptions, all in one tree.

::

    SupervisorError
    ├── PolicyError            a policy file is unreadable or invalid (.path, .field, .value)
    ├── EngineError            the engine process misbehaved (.engine_pid)
    │   ├── EngineStartError       it could not be started (executable missing, port taken)
    │   │   └── ContainerError         ... the container engine's API refused or was
    │   │                              unreachable (.kind, .runtime_message)
    │   └── EngineStopTimeout      a process of its group survived SIGKILL
    ├── ScrapeError            a probe of the engine failed (.url)
    │   ├── ScrapeTimeout          ... by timing out
    │   └── MetricsParseError      ... by returning text that is not Prometheus exposition
    ├── StoreError             the database refused a read or write
    ├── ServiceError           the service cannot run as asked
    │   ├── AlreadyRunning         another live supervisor holds this state directory (.pid)
    │   └── ListenError            the gateway or the admin API could not bind its port
    └── SetupError             building the engine environment or the demo models failed

Foreign exceptions (httpx, SQLAlchemy, OSError from subprocess) are translated once, at
the boundary of the stage that met them, with ``raise ... from exc``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CONTAINER_ERROR_KINDS",
    "HIDDEN",
    "AlreadyRunning",
    "ContainerError",
    "EngineError",
    "EngineStartError",
    "EngineStopTimeout",
    "ListenError",
    "MetricsParseError",
    "PolicyError",
    "ScrapeError",
    "ScrapeTimeout",
    "ServiceError",
    "SetupError",
    "StoreError",
    "SupervisorError",
]


class SupervisorError(Exception):
    """Base of every error this package raises on purpose."""


class _Hidden:
    """The value of a field an error must not show (it may be a secret)."""

    def __repr__(self) -> str:
        return "<not shown>"


HIDDEN = _Hidden()
"""Stands for a value a ``PolicyError`` does not print (issue 17)."""


class PolicyError(SupervisorError):
    """A policy file could not be read or did not validate.

    Attributes: ``path`` (the file, or ``"<string>"``), and for a validation error the
    dotted ``field`` (e.g. ``restart.start_limit_burst``), the offending ``value`` and
    the ``reason``. ``str(exc)`` gives all of them on one line per problem.
    """

    def __init__(
        self,
        path: str,
        problems: list[tuple[str, Any, str]] | None = None,
        *,
        message: str | None = None,
    ) -> None:
        self.path = path
        self.problems = problems or []
        first = self.problems[0] if self.problems else ("", None, message or "")
        self.field, self.value, self.reason = first
        if message is None:
            lines = [f"{path}: {f or '<top>'}: {r}" + ("" if v is HIDDEN else f" (got {v!r})")
                     for f, v, r in self.problems]
            message = "\n".join(lines)
        else:
            message = f"{path}: {message}"
        super().__init__(message)


class EngineError(SupervisorError):
    """The engine process misbehaved. ``engine_pid`` is the API server's pid, if known."""

    def __init__(self, message: str, *, engine_pid: int | None = None) -> None:
        self.engine_pid = engine_pid
        super().__init__(message)


class EngineStartError(EngineError):
    """The engine could not be launched at all (no executable, port already taken)."""


class ContainerError(EngineStartError):
    """A call to the container engine's API (Docker Engine API; podman serves it) failed.

    Attributes: ``kind``, one of ``CONTAINER_ERROR_KINDS``: ``api_unreachable`` (no
    service on the socket), ``permission`` (the socket refuses this user),
    ``image_missing`` (the supervisor never pulls), ``runtime_refused`` (the runtime would
    not create or start it: a bad device, mount or command), ``conflict`` (a container of
    that name exists); ``runtime_message``, the runtime's own words (secrets masked).
    A start that fails with one of these is classified, not blindly retried (issue 27).
    """

    def __init__(self, message: str, *, kind: str, runtime_message: str = "",
                 engine_pid: int | None = None) -> None:
        if kind not in CONTAINER_ERROR_KINDS:
            raise ValueError(f"unknown ContainerError kind {kind!r}")
        self.kind, self.runtime_message = kind, runtime_message
        super().__init__(message, engine_pid=engine_pid)


CONTAINER_ERROR_KINDS = ("api_unreachable", "permission", "image_missing", "runtime_refused",
                         "conflict")


class EngineStopTimeout(EngineError):
    """Processes of the engine's group were still alive after SIGKILL and the wait.

    ``survivors`` lists their pids.
    """

    def __init__(self, message: str, *, engine_pid: int | None, survivors: list[int]) -> None:
        self.survivors = survivors
        super().__init__(message, engine_pid=engine_pid)


class ScrapeError(SupervisorError):
    """A request to the engine (``/metrics``, ``/health``) failed. ``url`` says which."""

    def __init__(self, message: str, *, url: str) -> None:
        self.url = url
        super().__init__(message)


class ScrapeTimeout(ScrapeError):
    """The engine did not answer within the probe's timeout."""


class MetricsParseError(ScrapeError):
    """``/metrics`` returned text that prometheus_client could not parse."""


class StoreError(SupervisorError):
    """The database refused an operation (down, locked, full, schema missing)."""


class ServiceError(SupervisorError):
    """The service cannot run as asked; nothing was recorded (exit status 2)."""


class AlreadyRunning(ServiceError):
    """Another live supervisor holds the single-instance lock of this state directory.

    Attributes: ``path`` (the lock file), ``pid`` (the holder's, None if unreadable).
    """

    def __init__(self, path: str, pid: int | None) -> None:
        self.path, self.pid = path, pid
        who = f"pid {pid}" if pid is not None else "another process"
        super().__init__(f"another supervisor ({who}) already runs with the state directory "
                         f"of this policy (lock {path}): stop it first, or give this one its "
                         "own state_directory")


class ListenError(ServiceError, OSError):
    """A listener (the gateway, the admin API) could not bind ``host:port``.

    Attributes: ``name`` (which listener), ``host``, ``port``. Also an OSError, as
    binding errors are.
    """

    def __init__(self, name: str, host: str, port: int, why: str = "address in use?") -> None:
        self.name, self.host, self.port = name, host, port
        super().__init__(f"{name} could not listen on {host}:{port} ({why})")


class SetupError(SupervisorError):
    """Building the engine environment or the demo models failed; the message says which step."""

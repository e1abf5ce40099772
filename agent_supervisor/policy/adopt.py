"""The ``engine.adopt`` section: watch an engine the supervisor did not start (issue 31).

An operator who does not yet trust the supervisor runs it beside an engine that is
already there (a ``vllm serve`` under systemd, a container started by hand or by compose),
usually with ``mode: advise``: the supervisor finds that engine by a selector, watches it
with every sensor and records what it would do. Beside ``engine.runtime`` (how the
supervisor would run an engine of its own), ``engine.adopt`` says which existing engine is
watched instead::

    engine:
      executable: vllm            # used only with take_over: true
      port: 8000                  # where the adopted engine serves (or adopt.base_url)
      adopt:
        cmdline: "vllm serve .*--port 8000"   # exactly one of the five selectors
        log_file: /var/log/vllm.log           # optional: its log, for the log guards
        take_over: false                      # true: relaunch it with the policy's command

Selectors (exactly one): ``pid_file`` (a file holding the pid), ``cmdline`` (a regular
expression searched in each process's command line, arguments joined by spaces; exactly
one process must match), ``port`` (the process listening on that TCP port), ``container``
(a container's name or id) or ``container_label`` (``key=value`` or ``key``; exactly one
container must carry it), both through the Docker Engine API that podman serves.

The engine's URL is ``engine.host``/``engine.port`` as for a launched engine: ``base_url``
(``http://HOST:PORT``) sets both, and a ``port`` selector sets ``engine.port`` when the
policy does not; a value that disagrees with one the policy sets is refused.
"""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from agent_supervisor.policy.base import MAX_SECONDS, PolicyModel

__all__ = ["PROCESS_SELECTORS", "SELECTORS", "AdoptSpec", "check_adopt", "fill_engine_url"]

#: The selectors that find a process; the other two find a container.
PROCESS_SELECTORS = ("pid_file", "cmdline", "port")
#: Every selector, in the order an error names them.
SELECTORS = (*PROCESS_SELECTORS, "container", "container_label")


class AdoptSpec(PolicyModel):
    """An existing engine to watch instead of launching one (``engine.adopt``)."""

    pid_file: Annotated[str, Field(min_length=1)] | None = None
    """A file holding the engine's pid (its API server's), read at each search; relative
    to the policy file's directory."""
    cmdline: Annotated[str, Field(min_length=1)] | None = None
    """A regular expression (Python ``re.search``) over each process's command line, its
    arguments joined by single spaces. Exactly one process must match (a match whose
    ancestor matches too is that engine's own child); more is an error that lists their
    pids (write a narrower expression). The supervisor's own process never matches."""
    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    """The TCP port the engine listens on: the process holding that listening socket."""
    container: Annotated[str, Field(min_length=1)] | None = None
    """A container's name or id, through the Docker Engine API (podman serves it)."""
    container_label: Annotated[str, Field(min_length=1)] | None = None
    """A container label, ``key=value`` or ``key``; exactly one container must carry it."""
    api_socket: str = "unix:///run/podman/podman.sock"
    """The container engine's API (``container``/``container_label`` only): podman's
    ``podman system service`` socket by default; Docker's is ``unix:///var/run/docker.sock``."""
    base_url: str | None = None
    """``http://HOST:PORT`` of the engine's HTTP server; sets ``engine.host`` and
    ``engine.port`` (default: those, with a ``port`` selector as the port)."""
    log_file: Annotated[str, Field(min_length=1)] | None = None
    """The engine's log file, followed for the log guards (a process; a container's log
    comes from the container engine). None: no log, said so at start-up."""
    find_interval_seconds: Annotated[float, Field(gt=0, le=MAX_SECONDS)] = 2.0
    """How often the engine is looked for while it is absent (at start-up, or after it
    went away by itself): seconds."""
    take_over: bool = False
    """``false``: the supervisor may stop an adopted process (stacks, SIGTERM, SIGKILL) but
    never relaunches it; a decision that needs a relaunch in another mode is only advised.
    ``true``: the policy's command (``engine.executable``, ``engine.args``, the modes) is
    this engine's own: the first relaunch launches it as the supervisor's own engine, on
    record, and from then on it is supervised as launched. Processes only: an adopted
    container is restarted as itself."""

    @model_validator(mode="after")
    def _one_selector(self) -> AdoptSpec:
        given = [s for s in SELECTORS if getattr(self, s) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one selector of {', '.join(SELECTORS)} "
                f"(given: {', '.join(given) or 'none'})")
        if self.is_container and self.take_over:
            raise ValueError("take_over: an adopted container is restarted "
                             "as itself through the container engine; take_over is for a "
                             "process selector")
        if self.is_container and self.log_file is not None:
            raise ValueError("log_file: a container's log is read through the "
                             "container engine; log_file is for a process selector")
        return self

    @field_validator("cmdline")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @field_validator("container_label")
    @classmethod
    def _label(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[^=\s]+(=.*)?", value):
            raise ValueError(f"{value!r}: a label is key=value or key")
        return value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None:
            parsed = urlsplit(value)
            if parsed.scheme != "http" or not parsed.hostname or parsed.path not in ("", "/"):
                raise ValueError(f"{value!r}: http://HOST:PORT with no path")
            try:
                parsed.port  # noqa: B018 (raises on a bad port)
            except ValueError as exc:
                raise ValueError(f"{value!r}: {exc}") from None
        return value

    @property
    def is_container(self) -> bool:
        """Whether the selector finds a container (else a process)."""
        return self.container is not None or self.container_label is not None

    @property
    def selector(self) -> str:
        """The selector in words, for logs and records: ``cmdline 'vllm serve'``."""
        name = next(s for s in SELECTORS if getattr(self, s) is not None)
        return f"{name} {getattr(self, name)!r}"


def fill_engine_url(data: Any) -> Any:
    """``engine``'s raw mapping with ``host``/``port`` filled from ``adopt.base_url`` or
    ``adopt.port`` (a pydantic before-validator of ``EngineSpec``). Raises ValueError when
    the policy sets a different ``engine.host``/``engine.port``."""
    if not isinstance(data, dict) or not isinstance(data.get("adopt"), dict):
        return data
    adopt = data["adopt"]
    want: dict[str, Any] = {}
    url = adopt.get("base_url")
    if isinstance(url, str):
        parsed = urlsplit(url)
        try:
            port = parsed.port
        except ValueError:
            return data                    # the field's own validator names it
        if parsed.hostname:
            want["host"] = parsed.hostname
        want["port"] = port or 80
        source = "engine.adopt.base_url"
    elif isinstance(adopt.get("port"), int):
        want["port"] = adopt["port"]
        source = "engine.adopt.port"
    out = dict(data)
    for key, value in want.items():
        if key in data and data[key] != value:
            raise ValueError(f"engine.{key} is {data[key]!r} but {source} says {value!r}: "
                             f"set one of them")
        out[key] = value
    return out


def check_adopt(engine: Any) -> Any:
    """``engine.adopt`` fits the rest of ``engine`` (an after-validator of ``EngineSpec``).
    Raises ValueError for an engine across boxes (each rank is launched by its node's
    agent) and for ``take_over`` with ``runtime: container`` (a process found is relaunched
    as a process)."""
    adopt = engine.adopt
    if adopt is None:
        return engine
    if engine.nodes:
        raise ValueError("engine.adopt: an engine across boxes (engine.nodes) is launched "
                         "rank by rank by the supervisor; it cannot be adopted")
    if adopt.take_over and engine.runtime != "process":
        raise ValueError("engine.adopt.take_over: the adopted process is relaunched as a "
                         "process; engine.runtime must be process")
    return engine

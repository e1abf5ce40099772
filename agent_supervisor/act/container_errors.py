"""Errors of the Docker Engine API (docker-py, requests, urllib3, the socket), translated
once into ``ContainerError`` with its ``kind`` (``errors.py``).

docker-py raises ``docker.errors.APIError`` (an HTTP error: ``.response.status_code``,
``.explanation`` the API's ``message``), ``ImageNotFound``/``NotFound`` for a 404, and
``DockerException`` when the version check at connect fails; a dead or forbidden socket
arrives as requests' ``ConnectionError`` around urllib3's ``ProtocolError`` around the
``OSError`` (``FileNotFoundError``, ``ConnectionRefusedError``, ``PermissionError``); a
call past its timeout as urllib3's ``ReadTimeoutError`` inside requests' error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import docker.errors
import requests.exceptions
import urllib3.exceptions

from agent_supervisor.errors import ContainerError
from agent_supervisor.privacy import is_secret_name, mask_text

__all__ = ["gone", "said_by", "timed_out", "translate"]


def translate(what: str, exc: Exception, *, sock: str, timeout_s: float,
              env: dict[str, str], image: str | None = None) -> ContainerError:
    """One ``ContainerError`` for a foreign error of the API call ``what`` (``create``,
    ``start``, ``kill``, ...) on ``sock``: ``image_missing`` (ImageNotFound, or a 404 on
    create: podman's "image not known"), ``conflict`` (409, or podman's 500 "already in
    use"), ``permission`` (401/403, EACCES on the socket), ``api_unreachable`` (no
    service, or no answer within ``timeout_s``), else ``runtime_refused`` with the API's
    own message. ``env``'s values never appear in it."""
    said = _scrub(said_by(exc), env)
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, docker.errors.ImageNotFound) or \
            (what == "create" and isinstance(exc, docker.errors.NotFound)):
        return ContainerError(
            f"image {image} is not present on this runtime (the supervisor never pulls: "
            f"podman pull/load it, or docker pull/load): {said}",
            kind="image_missing", runtime_message=said)
    if isinstance(exc, docker.errors.APIError) and status is not None:
        kind = {409: "conflict", 401: "permission", 403: "permission"}.get(
            status, "runtime_refused")
        if "already in use" in said:     # podman: a taken name is a 500
            kind = "conflict"
        return ContainerError(f"{what}: the container engine at {sock} refused "
                              f"({status}): {said}", kind=kind, runtime_message=said)
    if timed_out(exc):
        return ContainerError(
            f"{what}: the container engine on {sock} did not answer within "
            f"{timeout_s:g} s (engine.container.api_timeout_seconds)"
            f": {said}", kind="api_unreachable", runtime_message=said)
    if _denied(exc):
        return ContainerError(
            f"{what}: the container engine's socket {sock} refuses this user (uid "
            f"{os.geteuid()}): {said}", kind="permission", runtime_message=said)
    return ContainerError(
        f"{what}: no container engine answers on {sock} (is `podman system service` "
        f"or dockerd running there?): {said}", kind="api_unreachable",
        runtime_message=said)


def said_by(exc: BaseException) -> str:
    """The runtime's own words: the API's ``message``, else the exception's text."""
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc).strip()


def _denied(exc: BaseException) -> bool:
    return any(isinstance(e, PermissionError) for e in _chain(exc)) or \
        "permission denied" in str(exc).lower()


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, its causes and the exceptions in their args (urllib3 wraps the
    socket's error in its own, requests wraps that: PermissionError, ReadTimeoutError)."""
    todo: list[BaseException] = [exc]
    seen: set[int] = set()
    while todo and len(seen) < 16:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [x for x in (e.__cause__, e.__context__, *getattr(e, "args", ()))
                 if isinstance(x, BaseException)]


def timed_out(exc: BaseException) -> bool:
    """A read that timed out (the API answered nothing within the call's timeout)."""
    return any(isinstance(e, (requests.exceptions.Timeout, TimeoutError,
                              urllib3.exceptions.TimeoutError)) for e in _chain(exc))


def gone(exc: ContainerError) -> bool:
    """A refusal that means the container is already gone or already stopped."""
    cause = exc.__cause__
    if isinstance(cause, docker.errors.NotFound):
        return True
    text = exc.runtime_message.lower()
    return exc.kind in ("conflict", "runtime_refused") and (
        "not running" in text or "no such container" in text or "already" in text
        or "removal of container" in text or "state improper" in text)


def _scrub(text: str, env: dict[str, str]) -> str:
    """The runtime's message without the environment's values (a runtime may quote its
    config): secret-named ones always, others of 8 characters or more."""
    for name, value in env.items():
        if value and (is_secret_name(name) or len(value) >= 8):
            text = text.replace(value, "***")
    return mask_text(text) or ""

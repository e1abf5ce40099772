"""A podman API service for the tests, with the tests' busybox image built.

    from tests.helpers.podman import podman_service  # noqa: F401  (the fixture)

``podman_service`` (session-scoped): ``podman system service`` on a socket of its own in
the session's temporary directory, with the project's ``containers.conf`` and storage
(``.podman/``, so the machine's container storage is never touched), and
``BUSYBOX_IMAGE`` built there (cached: 0.2 s the first time, a marker check after).
Podman missing: ``make podman`` is tried once; the tests skip, saying why, only when that
fails too. Containers a test leaves are its own to remove (``ContainerEngine.remove``);
the service's stop leaves running containers running.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_supervisor.demo.podman import (
    BUSYBOX_IMAGE,
    PodmanService,
    build_busybox_image,
    podman_missing,
    start_service,
)

__all__ = ["BUSYBOX_IMAGE", "STATE_DIR", "podman_service"]

ROOT = Path(__file__).resolve().parents[2]
STATE_DIR = ROOT / ".podman"


def _ensure_podman() -> None:
    if podman_missing() is None:
        return
    proc = subprocess.run(["make", "-C", str(ROOT), "podman"], capture_output=True, text=True,
                          check=False)
    if (missing := podman_missing()) is not None:
        pytest.skip(f"podman cannot be installed here ({missing}; `make podman`: status "
                    f"{proc.returncode}, {(proc.stderr or proc.stdout).strip()[-300:]})")


@pytest.fixture(scope="session")
def podman_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanService]:
    """The Docker Engine API (podman) on a socket of the session's; ``.url`` for
    ``engine.container.api_socket``."""
    _ensure_podman()
    build_busybox_image(state_dir=STATE_DIR)
    socket_path = tmp_path_factory.mktemp("podman") / "api.sock"
    with start_service(socket_path, state_dir=STATE_DIR,
                       log_path=socket_path.with_name("service.log")) as service:
        yield service

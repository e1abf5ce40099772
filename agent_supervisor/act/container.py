"""The engine as a container: a client of the Docker Engine API (podman serves the same).

``ContainerEngine`` creates, starts, finds, signals, waits for and removes the engine's
container through the API (the ``docker`` package on PyPI), never through a CLI. Every
method blocks (the launcher calls them with ``asyncio.to_thread``) for at most
``engine.container.api_timeout_seconds`` per API call, except ``wait`` (its own timeout)
and the log follower (a daemon thread per container, no timeout: an engine may be quiet
for hours).

What must not wait on a socket does not use it: ``cgroup_members`` and ``kill_members``
read and SIGKILL the container's processes from the host through its cgroup
(``act/cgroups.py``), so the memory-floor kill takes the same path and time as for a
process group.

Containers are named ``PREFIX-FLEET-RUNID`` and labelled (``LABEL_PREFIX`` + ``fleet``,
``host``, ``run-id``, ``mode``, ``argv-digest``), with no restart policy of their own (the
supervisor is the restart policy), not auto-removed (the exit status and the OOM flag are
read after the exit), no TTY, stdin closed, the host's network.

Errors: every failure of the API is translated once (``act/container_errors.py``) into
``ContainerError`` with a ``kind`` (``api_unreachable``, ``permission``, ``image_missing``,
``runtime_refused``, ``conflict``) and the runtime's own message, secrets masked.

Sources: Docker Engine API reference (ContainerCreate: HostConfig ``NetworkMode``,
``IpcMode``, ``ShmSize``, ``Ulimits``, ``Mounts``, ``Devices``, ``DeviceRequests``,
``RestartPolicy``; ContainerWait; ContainerLogs' multiplexed stream); docker-py 7.1
(``APIClient.create_host_config``, ``docker.types.DeviceRequest``/``Mount``/``Ulimit``,
``logs(stream=True, follow=True)``); podman-system-service(1) (the compat API).
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import signal as signals
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest, Mount, Ulimit

from agent_supervisor.act.cgroups import cgroup_procs_of
from agent_supervisor.act.container_errors import gone, said_by, timed_out, translate
from agent_supervisor.act.container_info import (
    LABEL_PREFIX,
    ContainerHandle,
    ContainerInfo,
    argv_digest,
    cgroup_members,
    container_name,
    info_from,
    kill_members,
)
from agent_supervisor.errors import ContainerError
from agent_supervisor.policy.container import ContainerSpec

# The values and the host-side kill live in container_info.py; they are exported here
# too, so the launcher imports the whole interface from one module.
__all__ = ["LABEL_PREFIX", "ContainerEngine", "ContainerError", "ContainerHandle",
           "ContainerInfo", "argv_digest", "cgroup_members", "container_name", "info_from",
           "kill_members"]

logger = logging.getLogger(__name__)

class ContainerEngine:
    """The container engine's API for one fleet on one host.

    Connects on first use (``docker.DockerClient(base_url=spec.api_socket,
    timeout=spec.api_timeout_seconds)``); ``close()`` lets go of the connection. Relative
    mount sources resolve against ``working_directory``, which is also the container's
    working directory.
    """

    def __init__(self, spec: ContainerSpec, *, fleet: str, host: str,
                 working_directory: Path) -> None:
        self.spec, self.fleet, self.host = spec, fleet, host
        self.working_directory = Path(working_directory)
        self._docker: docker.DockerClient | None = None
        self._podman: bool | None = None
        self._lock = threading.Lock()
        self._followers: dict[str, threading.Thread] = {}

    # -- the connection and the one translation of foreign errors ----------------------

    def _api(self) -> docker.APIClient:
        with self._lock:
            if self._docker is None:
                with self._translating("connect"):
                    self._probe_socket()
                    self._docker = docker.DockerClient(base_url=self.spec.api_socket,
                                                       timeout=self.spec.api_timeout_seconds)
            return self._docker.api

    def _probe_socket(self) -> None:
        """Connect to a unix socket once, closing it whatever happens (docker-py leaves
        the socket of a failed connect open). Raises OSError: FileNotFoundError or
        ConnectionRefusedError (no service), PermissionError."""
        if self.spec.api_socket.startswith("unix://"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.spec.api_timeout_seconds)
                sock.connect(self.spec.api_socket.removeprefix("unix://"))

    def is_podman(self) -> bool:
        """Whether the API is podman's (its ``/version`` names a "Podman Engine")."""
        if self._podman is None:
            api = self._api()
            with self._translating("version"):
                parts = api.version().get("Components") or []
            self._podman = any("podman" in str(c.get("Name", "")).lower() for c in parts)
        return self._podman

    @contextlib.contextmanager
    def _translating(self, what: str, *, env: dict[str, str] | None = None,
                     image: str | None = None) -> Iterator[None]:
        """Run a block of API calls; raise what it raised as one ``ContainerError``."""
        try:
            yield
        except ContainerError:
            raise
        except (docker.errors.DockerException, requests.exceptions.RequestException,
                OSError) as exc:
            raise translate(what, exc, sock=self.spec.api_socket,
                            timeout_s=self.spec.api_timeout_seconds, env=env or {},
                            image=image) from exc
    def ping(self) -> None:
        """Check that the API answers. Raises ContainerError (``api_unreachable`` or
        ``permission``, naming the socket)."""
        api = self._api()
        with self._translating("ping"):
            api.ping()

    # -- lifecycle ----------------------------------------------------------------------

    def _host_config(self, api: docker.APIClient) -> dict[str, Any]:
        spec = self.spec
        paths = [d for d in spec.devices if d.startswith("/dev/")]
        cdi = [d for d in spec.devices if not d.startswith("/dev/")]
        devices: list[Any] = [f"{d}:{d}:rwm" for d in paths]
        requests_ = []
        if cdi and self.is_podman():     # podman takes CDI names as devices
            devices += [{"PathOnHost": d, "PathInContainer": d, "CgroupPermissions": "rwm"}
                        for d in cdi]
        elif cdi:                        # Docker >= 25: the CDI device driver
            requests_.append(DeviceRequest(driver="cdi", device_ids=cdi))
        if spec.gpus == "all" and self.is_podman():
            raise ContainerError(
                "engine.container.gpus: all asks for Docker's --gpus (a device request), "
                "which podman's Docker-compatible API accepts and ignores (the engine would "
                "start without a GPU; podman issue 19338): give the GPUs as CDI devices "
                "instead (engine.container.devices: [nvidia.com/gpu=all], after "
                "`nvidia-ctk cdi generate`)", kind="runtime_refused")
        if spec.gpus == "all":           # --gpus all (NVIDIA Container Toolkit)
            requests_.append(DeviceRequest(count=-1, capabilities=[["gpu"]]))
        config: dict[str, Any] = api.create_host_config(
            network_mode=spec.network_mode, ipc_mode=spec.ipc_mode,
            shm_size=spec.shm_size_bytes if spec.ipc_mode != "host" else None,
            ulimits=self._ulimits() or None,
            mounts=[Mount(target=m.target, source=os.path.normpath(
                self.working_directory / m.source), type="bind", read_only=m.read_only)
                for m in spec.mounts] or None,
            devices=devices or None, device_requests=requests_ or None,
            privileged=spec.privileged, restart_policy={"Name": "no"}, auto_remove=False)
        return config

    def _ulimits(self) -> list[Ulimit]:
        """The spec's ulimits. Podman, given any, sets nofile and nproc too (to 1048576
        unless named: podman's ``addRlimits``), which fails where that is above the hard
        limits (``setrlimit ... operation not permitted``); the two are then given as
        this process's own limits, which is what Docker does for those not named."""
        out = [Ulimit(name=u.name, soft=u.soft, hard=u.soft if u.hard is None else u.hard)
               for u in self.spec.ulimits]
        if out and self.is_podman():
            named = {u.name for u in self.spec.ulimits}
            limits = self._service_limits()
            out += [Ulimit(name=name, soft=soft, hard=hard)
                    for name, (soft, hard) in limits.items() if name not in named]
        return out

    def _service_limits(self) -> dict[str, tuple[int, int]]:
        """nofile and nproc of the process that serves the API (its pid from the unix
        socket's SO_PEERCRED, its ``/proc/PID/limits``), which the runtime it starts
        cannot exceed without CAP_SYS_RESOURCE; this process's own when that cannot be
        read (a TCP socket, another PID namespace). -1: unlimited."""
        own = {"nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
               "nproc": resource.getrlimit(resource.RLIMIT_NPROC)}
        if not self.spec.api_socket.startswith("unix://"):
            return own
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(2.0)
                sock.connect(self.spec.api_socket.removeprefix("unix://"))
                creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                        struct.calcsize("3i"))
            pid = struct.unpack("3i", creds)[0]
            text = Path(f"/proc/{pid}/limits").read_text()
        except OSError:
            return own
        rows = {"Max open files": "nofile", "Max processes": "nproc"}
        for line in text.splitlines():
            for title, name in rows.items():
                if line.startswith(title):
                    soft, hard = line[len(title):].split()[:2]
                    own[name] = (-1 if soft == "unlimited" else int(soft),
                                 -1 if hard == "unlimited" else int(hard))
        return own

    def run(self, *, run_id: str, mode: str, argv: list[str], env: dict[str, str],
            log_path: Path) -> ContainerHandle:
        """Create and start the engine's container; follow its log into ``log_path``.

        Steps: 1. create (name, labels, ``argv`` as the command, the spec's entrypoint,
        host config); 2. start (a refusal removes the created container); 3. inspect for
        the init's host pid and its cgroup files; 4. a daemon thread appends the log
        stream's raw bytes (stdout and stderr) to ``log_path`` as they come. Returns the
        handle (``pid`` None when the command ended at once). Raises ContainerError:
        ``image_missing``, ``conflict`` (the name is taken), ``runtime_refused``,
        ``api_unreachable``, ``permission``.
        """
        api, spec = self._api(), self.spec
        name = container_name(spec.name_prefix, self.fleet, run_id)
        labels = {f"{LABEL_PREFIX}{k}": v for k, v in (
            ("fleet", self.fleet), ("host", self.host), ("run-id", run_id), ("mode", mode),
            ("argv-digest", argv_digest(argv)))}
        # [] must clear the image's entrypoint: sent as [""], as `docker run
        # --entrypoint ""` does (an empty list keeps the image's, seen with podman 4.3).
        extra = {} if spec.entrypoint is None else {"entrypoint": spec.entrypoint or [""]}
        with self._translating("create", env=env, image=spec.image):
            created = api.create_container(
                spec.image, command=argv, name=name, labels=labels, environment=env,
                working_dir=str(self.working_directory), user=spec.user, detach=True,
                tty=False, stdin_open=False, host_config=self._host_config(api), **extra)
        cid = created["Id"]
        try:
            with self._translating("start", env=env):
                api.start(cid)
        except ContainerError:
            with contextlib.suppress(ContainerError):
                self.remove(cid)
            raise
        handle = self.handle(cid) or ContainerHandle(cid, name, None)
        logger.info("container %s (%s) started: image %s, init pid %s, cgroups %s", name,
                    cid[:12], spec.image, handle.pid, [str(p.parent) for p in
                                                       handle.cgroup_procs[:1]])
        self.follow_logs(cid, log_path, since=None)
        return handle

    def follow_logs(self, container_id: str, log_path: Path, *,
                    since: float | str | None = "log") -> None:
        """Append the container's log stream (stdout and stderr, raw bytes) to
        ``log_path`` from a daemon thread until the container ends; a second call for
        the same container while one follows does nothing.

        ``since``: Unix seconds to start from; None: from the container's start;
        ``"log"`` (the default, for an adopted container): from the last write to
        ``log_path`` (or the start when it is empty), so a restarted supervisor neither
        repeats nor loses much. Raises ContainerError when the API is unreachable.
        """
        if (t := self._followers.get(container_id)) is not None and t.is_alive():
            return
        if since == "log":
            since = log_path.stat().st_mtime if log_path.exists() and \
                log_path.stat().st_size else None
        version = self._api().api_version
        with self._translating("logs"):
            # Its own connection without a read timeout: a quiet engine is no error.
            client = docker.APIClient(base_url=self.spec.api_socket, version=version,
                                      timeout=None)
        kwargs: dict[str, Any] = {"since": since} if since else {}
        try:
            out = open(log_path, "ab")  # noqa: SIM115 (the thread closes it)
        except OSError as exc:
            client.close()
            raise ContainerError(f"cannot open the run's log {log_path}: {exc}",
                                 kind="runtime_refused") from exc
        thread = threading.Thread(target=_follow, args=(client, container_id, out, kwargs),
                                  name=f"container-log-{container_id[:12]}", daemon=True)
        self._followers[container_id] = thread
        thread.start()

    def find(self) -> list[ContainerInfo]:
        """Every container (any state) labelled with this fleet and this host."""
        api = self._api()
        with self._translating("list"):
            listed = api.containers(all=True,
                                    filters={"label": [f"{LABEL_PREFIX}fleet={self.fleet}"]})
        out = []
        for c in listed:
            if (c.get("Labels") or {}).get(f"{LABEL_PREFIX}host") == self.host and \
                    (info := self.inspect(c["Id"])) is not None:
                out.append(info)
        return out

    def labelled(self, label: str) -> list[ContainerInfo]:
        """Every container (any state) carrying ``label`` (``key=value`` or ``key``), ours
        or not: an engine to adopt (``engine.adopt.container_label``)."""
        api = self._api()
        with self._translating("list"):
            listed = api.containers(all=True, filters={"label": [label]})
        return [info for c in listed if (info := self.inspect(c["Id"])) is not None]

    def start(self, container_id: str) -> None:
        """Start an existing container again (an adopted one after its stop: it keeps its
        own command and settings). Raises ContainerError."""
        api = self._api()
        with self._translating("start"):
            api.start(container_id)

    def inspect(self, container_id: str) -> ContainerInfo | None:
        """The container's state, or None when there is no such container."""
        data = self._inspect(container_id)
        return None if data is None else info_from(data)

    def _inspect(self, container_id: str) -> dict[str, Any] | None:
        api = self._api()
        try:
            with self._translating("inspect"):
                data: dict[str, Any] = api.inspect_container(container_id)
                return data
        except ContainerError as exc:
            if isinstance(exc.__cause__, docker.errors.NotFound):
                return None
            raise

    def handle(self, container_id: str) -> ContainerHandle | None:
        """The handle of a container (adoption): its init's pid and cgroup files while it
        runs, pid None and no files otherwise; None when there is no such container."""
        info = self.inspect(container_id)
        if info is None:
            return None
        procs = cgroup_procs_of(info.pid) if info.pid is not None else ()
        return ContainerHandle(info.id, info.name, info.pid, procs)

    def runs_argv(self, container_id: str, argv: list[str]) -> bool:
        """Whether the container was made for ``argv`` (its ``argv-digest`` label, or
        its command)."""
        data = self._inspect(container_id)
        if data is None:
            return False
        config = data.get("Config") or {}
        digest = (config.get("Labels") or {}).get(f"{LABEL_PREFIX}argv-digest")
        return digest == argv_digest(argv) if digest else config.get("Cmd") == argv

    def signal(self, container_id: str, sig: int) -> None:
        """Send ``sig`` to the container's init through the API (SIGTERM for a stop). A
        container that is gone or no longer running is no error."""
        api = self._api()
        try:
            with self._translating("kill"):
                api.kill(container_id, signal=int(sig))
        except ContainerError as exc:
            if not gone(exc):
                raise

    def remove(self, container_id: str) -> None:
        """Remove the container, killing it first if it still runs (SIGKILL: ``force``
        alone would give it podman's 10 s stop timeout); a missing one is fine."""
        api = self._api()
        with contextlib.suppress(ContainerError):
            self.signal(container_id, signals.SIGKILL)
        try:
            with self._translating("remove"):
                api.remove_container(container_id, force=True)
        except ContainerError as exc:
            if not gone(exc):
                raise

    def wait(self, container_id: str, timeout: float | None = None) -> tuple[int | None, bool]:
        """Block until the container has ended; returns (exit status, OOM-killed).

        The status is the container's (128 + N: killed by signal N); (None, False) when
        ``timeout`` seconds passed first or the container is gone. Raises ContainerError
        when the API is unreachable.
        """
        api = self._api()
        try:
            with self._translating("wait"):
                code = api.wait(container_id, timeout=timeout).get("StatusCode")
        except ContainerError as exc:
            if (timeout is not None and timed_out(exc)) or gone(exc):
                return None, False
            raise
        info = self.inspect(container_id)
        return code, bool(info and info.oom_killed)

    def close(self) -> None:
        """Let go of the API connection (log followers end with their containers)."""
        with self._lock:
            if self._docker is not None:
                self._docker.close()
                self._docker = None


def _follow(client: docker.APIClient, container_id: str, out: BinaryIO,
            kwargs: dict[str, Any]) -> None:
    """The log follower's thread: chunks of the demultiplexed stream, appended raw."""
    try:
        with out:
            for chunk in client.logs(container_id, stdout=True, stderr=True, stream=True,
                                     follow=True, **kwargs):
                out.write(chunk)
                out.flush()
        logger.debug("container %s: log stream ended", container_id[:12])
    except (docker.errors.DockerException, requests.exceptions.RequestException,
            OSError) as exc:
        logger.warning("container %s: log stream into %s broke off: %s", container_id[:12],
                       out.name, said_by(exc))
    finally:
        client.close()

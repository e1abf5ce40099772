"""Issue 27: the container engine client (``act/container.py``) against a real podman.

Every container here is Debian's static busybox (``BUSYBOX_IMAGE``), run through podman's
Docker-compatible API on the session's own socket (``tests/helpers/podman.py``): create
with labels, the log stream into the run's file, found again by labels, SIGTERM through
the API, SIGKILL of the whole cgroup from the host (timed), exit status, removal, and each
refusal classified. The cgroup parsing is checked first on text recorded from the real CPU
vLLM in a podman container on this machine kind (cgroup v1 hybrid) and a cgroup v2 box.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent_supervisor.act.cgroups import cgroup_dirs, cgroup_mounts
from agent_supervisor.act.container import (
    LABEL_PREFIX,
    ContainerEngine,
    ContainerError,
    argv_digest,
    cgroup_members,
    kill_members,
)
from agent_supervisor.demo.podman import build_busybox_image
from agent_supervisor.policy.container import ContainerSpec, MountSpec, UlimitSpec
from tests.helpers.podman import BUSYBOX_IMAGE, STATE_DIR, podman_service  # noqa: F401

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT_IMAGE = "localhost/agent-supervisor-busybox:1-entrypoint"
ID = "8e47ac5c868132c622fc80d5ed7ecdbb70c7f40c95615b866c128439b3d884c9"
#: /proc/<State.Pid>/cgroup of the real CPU vLLM's API server in a podman 4.3.1 container
#: (runc, cgroupfs manager) on a cgroup v1 hybrid box, as read from the host.
HYBRID_CGROUP = "\n".join(f"{n}:{c}:/libpod_parent/libpod-{ID}" for n, c in (
    (9, "name=systemd"), (8, "pids"), (7, "blkio"), (6, "freezer"), (5, "devices"),
    (4, "memory"), (3, "cpuset"), (2, "cpuacct"), (1, "cpu"), (0, ""))) + "\n"
HYBRID_MOUNTINFO = """\
25 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup rw,relatime shared:8 - tmpfs tmpfs rw,mode=755
32 31 0:27 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
33 31 0:28 / /sys/fs/cgroup/cpuacct rw,relatime shared:10 - cgroup cgroup rw,cpuacct
35 31 0:30 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory
39 31 0:34 / /sys/fs/cgroup/pids rw,relatime shared:16 - cgroup cgroup rw,pids
40 31 0:35 / /sys/fs/cgroup/systemd rw,relatime shared:17 - cgroup cgroup rw,name=systemd
41 31 0:36 / /sys/fs/cgroup/unified rw,relatime shared:18 - cgroup2 cgroup2 rw
"""


def test_issue_27_cgroup_dirs_v1_hybrid_memory_pids_cpu() -> None:
    mounts = cgroup_mounts(HYBRID_MOUNTINFO)
    assert mounts["memory"] == ("/", "/sys/fs/cgroup/memory")
    assert mounts[""] == ("/", "/sys/fs/cgroup/unified")
    assert cgroup_dirs(HYBRID_CGROUP, mounts) == tuple(
        Path(f"/sys/fs/cgroup/{c}/libpod_parent/libpod-{ID}") for c in ("memory", "pids", "cpu"))


def test_issue_27_cgroup_dirs_combined_controllers_and_v2() -> None:
    combined = HYBRID_MOUNTINFO.replace("/sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup "
                                        "cgroup rw,cpu", "/sys/fs/cgroup/cpu,cpuacct rw "
                                        "shared:9 - cgroup cgroup rw,cpu,cpuacct")
    text = "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n8:pids:/docker/abc\n0::/\n"
    assert cgroup_dirs(text, cgroup_mounts(combined)) == (
        Path("/sys/fs/cgroup/memory/docker/abc"), Path("/sys/fs/cgroup/pids/docker/abc"),
        Path("/sys/fs/cgroup/cpu,cpuacct/docker/abc"))
    v2 = "29 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
    scope = "0::/system.slice/docker-abc.scope\n"
    assert cgroup_dirs(scope, cgroup_mounts(v2)) == (
        Path("/sys/fs/cgroup/system.slice/docker-abc.scope"),)
    assert cgroup_dirs(scope, {}) == ()


# -- against the real podman -----------------------------------------------------------


@pytest.fixture
def make_engine(podman_service, tmp_path: Path  # noqa: F811
                ) -> Iterator[Callable[..., ContainerEngine]]:
    """ContainerEngine(spec with the session's socket and ``**spec``) for a fleet of this
    test's own; every container of that fleet is removed at the end."""
    fleet = f"t{uuid.uuid4().hex[:8]}"
    made: list[ContainerEngine] = []

    def make(*, host: str = "box1", working_directory: Path = tmp_path,
             **spec: object) -> ContainerEngine:
        spec.setdefault("image", BUSYBOX_IMAGE)
        spec.setdefault("ipc_mode", None)
        eng = ContainerEngine(ContainerSpec(api_socket=podman_service.url, **spec),
                              fleet=fleet, host=host, working_directory=working_directory)
        made.append(eng)
        return eng

    yield make
    for eng in made:
        for info in eng.find():
            eng.remove(info.id)
        eng.close()


def _until(check: Callable[[], object], timeout_s: float = 10.0) -> object:
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
    return value


def test_issue_27_run_labels_find_logs_and_cgroup(make_engine, tmp_path: Path) -> None:
    eng = make_engine()
    log = tmp_path / "run.log"
    argv = ["/bin/sh", "-c", 'echo "out $GREETING"; echo err >&2; sleep 300 & exec sleep 301']
    t0 = time.monotonic()
    handle = eng.run(run_id="r1", mode="fast", argv=argv, env={"GREETING": "hello"},
                     log_path=log)
    print(f"\ncreate + start + inspect: {time.monotonic() - t0:.2f} s")
    assert handle.name == f"agent-supervisor-{eng.fleet}-r1"
    assert handle.pid is not None and handle.cgroup_procs
    assert all(f.name == "cgroup.procs" and f.exists() for f in handle.cgroup_procs)
    assert any("/memory/" in str(f) for f in handle.cgroup_procs)
    members = _until(lambda: len(cgroup_members(handle)) == 2 and cgroup_members(handle))
    assert handle.pid in members
    with open(f"/proc/{handle.pid}/status") as f:     # the container's init: pid 1 inside
        assert [line.split()[-1] for line in f if line.startswith("NSpid")] == ["1"]
    _until(lambda: b"out hello\n" in log.read_bytes() and b"err\n" in log.read_bytes())

    [info] = eng.find()
    assert (info.id, info.name, info.status, info.pid) == (handle.id, handle.name, "running",
                                                           handle.pid)
    assert info.labels == {f"{LABEL_PREFIX}fleet": eng.fleet, f"{LABEL_PREFIX}host": "box1",
                           f"{LABEL_PREFIX}run-id": "r1", f"{LABEL_PREFIX}mode": "fast",
                           f"{LABEL_PREFIX}argv-digest": argv_digest(argv)}
    assert info.exit_code is None and info.started_at is not None and not info.oom_killed
    assert info.image == BUSYBOX_IMAGE
    assert make_engine(host="box2").find() == []       # same fleet, another host
    assert eng.runs_argv(handle.id, argv) and not eng.runs_argv(handle.id, ["/bin/sh"])
    assert eng.handle(handle.id) == handle
    assert eng.wait(handle.id, timeout=0.5) == (None, False)     # still running


def test_issue_27_sigterm_through_the_api_and_exit_status(make_engine, tmp_path: Path) -> None:
    eng = make_engine()
    log = tmp_path / "run.log"
    handle = eng.run(run_id="r1", mode="m", log_path=log, env={}, argv=[
        "/bin/sh", "-c", 'trap "echo got-term; exit 3" TERM; echo up; '
        "while :; do sleep 0.1; done"])
    _until(lambda: b"up\n" in log.read_bytes())
    eng.signal(handle.id, signal.SIGTERM)
    assert eng.wait(handle.id, timeout=10) == (3, False)
    info = eng.inspect(handle.id)
    assert info is not None and (info.status, info.exit_code, info.pid) == ("exited", 3, None)
    _until(lambda: b"got-term\n" in log.read_bytes())
    after = eng.handle(handle.id)
    assert after is not None and (after.pid, after.cgroup_procs) == (None, ())
    eng.signal(handle.id, signal.SIGTERM)               # not running any more: no error
    eng.remove(handle.id)
    assert eng.inspect(handle.id) is None and eng.handle(handle.id) is None
    eng.remove(handle.id)                               # gone already: no error
    assert eng.wait(handle.id, timeout=2) == (None, False)


def test_issue_27_kill_members_empties_the_cgroup_within_1s(make_engine,
                                                           tmp_path: Path) -> None:
    eng = make_engine()
    handle = eng.run(run_id="r1", mode="m", env={}, log_path=tmp_path / "run.log", argv=[
        "/bin/sh", "-c", "trap '' TERM; for i in 1 2 3 4; do sleep 300 & done; "
        "(trap '' TERM; sleep 302) & exec sleep 301"])
    before = _until(lambda: len(cgroup_members(handle)) == 6 and cgroup_members(handle))
    t0 = time.monotonic()
    killed = kill_members(handle)
    _until(lambda: not cgroup_members(handle), timeout_s=5.0)
    seconds = time.monotonic() - t0
    print(f"\nkill_members: {len(killed)} pids SIGKILLed, cgroup empty after {seconds:.3f} s")
    # The init first; members its death already took are not signalled again.
    assert killed[0] == handle.pid and set(killed) <= set(before)
    assert seconds < 1.0
    assert eng.wait(handle.id, timeout=10) == (137, False)
    assert kill_members(handle) == [] and cgroup_members(handle) == []
    t0 = time.monotonic()
    eng.remove(handle.id)
    print(f"remove: {time.monotonic() - t0:.2f} s")
    assert eng.find() == []


def test_issue_27_remove_of_a_running_container_kills_it_at_once(make_engine,
                                                                tmp_path: Path) -> None:
    eng = make_engine()
    handle = eng.run(run_id="r1", mode="m", env={}, log_path=tmp_path / "run.log",
                     argv=["/bin/sh", "-c", "trap '' TERM; exec sleep 300"])
    t0 = time.monotonic()
    eng.remove(handle.id)
    assert time.monotonic() - t0 < 5.0                  # not podman's 10 s stop timeout
    assert eng.find() == [] and cgroup_members(handle) == []


def test_issue_27_oom_kill_status(make_engine, tmp_path: Path) -> None:
    """No memory limit in the spec (GB10's GPU memory is not in the cgroup anyway): the
    test sets one on the container's memory cgroup from the host, then allocates."""
    eng = make_engine()
    handle = eng.run(run_id="r1", mode="m", env={}, log_path=tmp_path / "run.log", argv=[
        "/bin/sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.05; done; "
        "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo survived"])
    memory = [f.parent for f in handle.cgroup_procs if "/memory/" in str(f)]
    if not memory:
        pytest.skip("no v1 memory cgroup to set a limit on")
    (memory[0] / "memory.limit_in_bytes").write_text(str(32 * 2**20))
    subprocess.run(["nsenter", "-t", str(handle.pid), "-m", "touch", "/tmp/go"], check=True)
    code, oom = eng.wait(handle.id, timeout=60)
    assert code == 137                                   # the kernel's OOM kill: SIGKILL
    if not oom:
        pytest.skip("OOM-killed (status 137), but this runtime does not report OOMKilled "
                    "(podman 4.3.1, conmon on cgroup v1 hybrid: false even with a limit "
                    "set at create)")


def test_issue_27_image_missing(make_engine, tmp_path: Path) -> None:
    eng = make_engine(image="localhost/agent-supervisor-no-such-image:1")
    with pytest.raises(ContainerError) as exc:
        eng.run(run_id="r1", mode="m", argv=["true"], env={"HF_TOKEN": "hf_secret_value"},
                log_path=tmp_path / "run.log")
    assert exc.value.kind == "image_missing"
    assert "image localhost/agent-supervisor-no-such-image:1 is not present on this " \
           "runtime (the supervisor never pulls" in str(exc.value)
    assert "hf_secret_value" not in str(exc.value)
    assert eng.find() == []


def test_issue_27_runtime_refused_and_conflict(make_engine, tmp_path: Path) -> None:
    eng = make_engine()
    with pytest.raises(ContainerError) as exc:
        eng.run(run_id="r1", mode="m", argv=["/no/such/engine", "--port", "1"],
                env={"API_KEY": "k-secret-1234"}, log_path=tmp_path / "run.log")
    assert exc.value.kind == "runtime_refused"
    assert "/no/such/engine" in exc.value.runtime_message
    assert "k-secret-1234" not in str(exc.value)
    assert eng.find() == []                              # the refused one is removed
    eng.run(run_id="r2", mode="m", argv=["sleep", "300"], env={},
            log_path=tmp_path / "run.log")
    with pytest.raises(ContainerError) as exc:
        eng.run(run_id="r2", mode="m", argv=["sleep", "300"], env={},
                log_path=tmp_path / "run.log")
    assert exc.value.kind == "conflict"
    assert f"agent-supervisor-{eng.fleet}-r2" in exc.value.runtime_message
    with pytest.raises(ContainerError) as exc:
        make_engine(devices=["/dev/no-such-device0"]).run(
            run_id="r3", mode="m", argv=["true"], env={}, log_path=tmp_path / "run.log")
    assert exc.value.kind == "runtime_refused" and "/dev/no-such-device0" in str(exc.value)


def test_issue_27_gpus_all_on_podman_is_refused_with_the_way(make_engine,
                                                             tmp_path: Path) -> None:
    eng = make_engine(gpus="all")
    assert eng.is_podman()
    with pytest.raises(ContainerError) as exc:
        eng.run(run_id="r1", mode="m", argv=["true"], env={}, log_path=tmp_path / "run.log")
    assert exc.value.kind == "runtime_refused"
    assert "devices: [nvidia.com/gpu=all]" in str(exc.value)
    assert eng.find() == []


def test_issue_27_host_config_reaches_the_container(make_engine, tmp_path: Path) -> None:
    """Mounts (read-only, a relative source against the working directory), the working
    directory, user, ulimits, IPC with shm size, the host network, the environment."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "weights").write_text("w\n")
    eng = make_engine(
        working_directory=tmp_path, ipc_mode="private", shm_size_bytes=64 * 2**20,
        user="65534", ulimits=[UlimitSpec(name="nofile", soft=512, hard=1024)],
        mounts=[MountSpec(source="data", target="/models"),
                MountSpec(source=str(tmp_path / "data"), target="/rw", read_only=False)])
    log = tmp_path / "run.log"
    handle = eng.run(run_id="r1", mode="m", log_path=log, env={"X_ONE": "1"}, argv=[
        "/bin/sh", "-c", "echo pwd=$(pwd) uid=$(id -u) nofile=$(ulimit -n) x=$X_ONE; "
        "cat /models/weights; touch /models/new 2>/dev/null || echo ro-refused; "
        "df -k /dev/shm | tail -1; ls /proc/1/ns/net >/dev/null && cat /proc/net/dev"])
    assert eng.wait(handle.id, timeout=20)[0] == 0
    out = _until(lambda: b"Inter-" in log.read_bytes() and log.read_text(), timeout_s=5)
    assert f"pwd={tmp_path} uid=65534 nofile=512 x=1\nw\nro-refused\n" in out
    assert " 65536 " in out                              # --shm-size 64 MiB
    host_ifaces = {line.split(":")[0].strip() for line in
                   Path("/proc/net/dev").read_text().splitlines()[2:]}
    assert host_ifaces <= {line.split(":")[0].strip() for line in out.splitlines()
                           if ":" in line and "|" not in line}   # the host's network
    assert not (tmp_path / "data" / "new").exists()


def test_issue_27_entrypoint_kept_or_cleared(make_engine, tmp_path: Path) -> None:
    build_busybox_image(state_dir=STATE_DIR, name=ENTRYPOINT_IMAGE,
                        entrypoint=["/bin/echo", "from-entrypoint"])
    for i, (entrypoint, said) in enumerate((
            (None, b"from-entrypoint /bin/echo argv\n"), ([], b"argv\n"),
            (["/bin/echo", "other"], b"other /bin/echo argv\n"))):
        log = tmp_path / f"{i}.log"
        eng = make_engine(image=ENTRYPOINT_IMAGE, entrypoint=entrypoint)
        handle = eng.run(run_id=uuid.uuid4().hex[:6], mode="m", argv=["/bin/echo", "argv"],
                         env={}, log_path=log)
        assert eng.wait(handle.id, timeout=10)[0] == 0
        _until(lambda log=log: log.exists() and log.read_bytes())
        assert log.read_bytes() == said, entrypoint


def test_issue_27_follow_logs_of_an_adopted_container(make_engine, tmp_path: Path) -> None:
    """A restarted supervisor follows the running container's log from its log file's
    last write, not from the start."""
    eng = make_engine()
    handle = eng.run(run_id="r1", mode="m", env={}, log_path=tmp_path / "first.log", argv=[
        "/bin/sh", "-c", "i=0; while :; do i=$((i+1)); echo tick $i $(date +%s); "
        "sleep 0.2; done"])
    _until(lambda: b"tick 8 " in (tmp_path / "first.log").read_bytes())
    adopted = tmp_path / "adopted.log"
    adopted.write_bytes(b"earlier life\n")
    since = adopted.stat().st_mtime
    again = make_engine()                                # a new supervisor's client
    again.follow_logs(handle.id, adopted)
    again.follow_logs(handle.id, adopted)                # one follower per container
    _until(lambda: adopted.read_bytes().count(b"tick") >= 3)
    lines = adopted.read_text().splitlines()
    assert lines[0] == "earlier life" and "tick 1 " not in adopted.read_text()
    assert all(int(line.split()[2]) >= int(since) - 1 for line in lines[1:] if
               line.startswith("tick"))
    numbers = [int(line.split()[1]) for line in lines[1:] if line.startswith("tick")]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))


def test_issue_27_absent_socket_is_api_unreachable(tmp_path: Path) -> None:
    sock = tmp_path / "no-service.sock"
    eng = ContainerEngine(ContainerSpec(image=BUSYBOX_IMAGE, api_socket=f"unix://{sock}"),
                          fleet="f", host="h", working_directory=tmp_path)
    for call in (eng.ping, eng.find, lambda: eng.run(
            run_id="r", mode="m", argv=["true"], env={}, log_path=tmp_path / "l")):
        with pytest.raises(ContainerError) as exc:
            call()
        assert exc.value.kind == "api_unreachable"
        assert f"no container engine answers on unix://{sock}" in str(exc.value)


SYSTEM_PYTHON = "/usr/bin/python3"
PERMISSION_CHECK = """
import sys
from pathlib import Path
from agent_supervisor.act.container import ContainerEngine, ContainerError
from agent_supervisor.policy.container import ContainerSpec
try:
    ContainerEngine(ContainerSpec(image="x", api_socket=sys.argv[1]), fleet="f", host="h",
                    working_directory=Path("/")).ping()
except ContainerError as exc:
    print(exc.kind)
    print(exc)
"""


def test_issue_27_socket_without_permission(podman_service) -> None:  # noqa: F811
    """As root the socket's mode is no obstacle (CAP_DAC_OVERRIDE), so the check runs as
    ``nobody``: with the system's Python (the venv's is a link into /root) and the venv's
    packages on its path."""
    site = ROOT / ".venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" \
        / "site-packages"
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True, check=False).stdout.strip() \
        if shutil.which(SYSTEM_PYTHON) else None
    if os.geteuid() != 0 or version != str(sys.version_info[:2]):
        pytest.skip(f"needs root and a system Python {sys.version_info[:2]} (found {version})")
    proc = subprocess.run([SYSTEM_PYTHON, "-c", PERMISSION_CHECK, podman_service.url],
                          user="nobody", group="nogroup", cwd="/", capture_output=True,
                          text=True, check=False, timeout=60,
                          env={"PYTHONPATH": f"{ROOT}:{site}", "PATH": "/usr/bin:/bin"})
    kind, _, message = proc.stdout.partition("\n")
    assert (kind, proc.stderr) == ("permission", ""), proc
    assert f"the container engine's socket {podman_service.url} refuses this user (uid " \
           "65534)" in message

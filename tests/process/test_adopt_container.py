"""Issue 31 item 1: a container the supervisor did not start, adopted by name through the
Docker Engine API that podman serves (tests/helpers/podman.py's service and busybox
image; skipped, saying why, where podman is not installed: this test never installs it).

The "engine" is busybox's ``httpd`` on the host network answering ``/health``, made by the
test under another fleet's labels: advising, it is adopted (its log read through the
container engine), its processes SIGKILLed from the host are a would-be restart and the
container stays exited; the ``act`` lever then starts the same container again through the
API (no new container) and adopts its new pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from agent_supervisor.act.container import ContainerEngine, kill_members
from agent_supervisor.demo.podman import BUSYBOX_IMAGE, podman_missing
from agent_supervisor.policy.container import ContainerSpec
from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.admin_api import TOKEN, auth
from tests.helpers.podman import podman_service  # noqa: F401  (the fixture)
from tests.helpers.policies import fake_engine_policy
from tests.helpers.ports import free_ports
from tests.helpers.waiting import wait_for

FAST = {"tick_seconds": 0.2, "probe_timeout_seconds": 1}


@pytest.fixture
def podman(request: pytest.FixtureRequest):
    """The session's podman service, only where podman is already installed."""
    if (missing := podman_missing()) is not None:
        pytest.skip(f"{missing}: the container adoption test needs podman")
    busybox = shutil.which("busybox") or "/bin/busybox"
    listed = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=False)
    if "httpd" not in listed.stdout.split():
        pytest.skip("this busybox has no httpd applet to stand in for an engine")
    return request.getfixturevalue("podman_service")


async def test_issue_31_a_container_adopted_by_name_is_advised_then_started_as_itself(
        podman, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPERVISOR_ADMIN_TOKEN", TOKEN)
    (port,) = free_ports(1)
    maker = ContainerEngine(ContainerSpec(image=BUSYBOX_IMAGE, api_socket=podman.url,
                                          ipc_mode=None),
                            fleet=f"other{uuid.uuid4().hex[:6]}", host="elsewhere",
                            working_directory=tmp_path)
    handle = maker.run(run_id="by-hand", mode="-", env={}, log_path=tmp_path / "maker.log",
                       argv=["/bin/sh", "-c", "mkdir -p /tmp/www && echo ok > "
                             f"/tmp/www/health && echo engine up && exec httpd -f -p "
                             f"127.0.0.1:{port} -h /tmp/www"])
    policy = fake_engine_policy(
        tmp_path, sampling=FAST, mode="advise", restart={"restart_delay_seconds": 0},
        engine={"port": port, "adopt": {"container": handle.name, "api_socket": podman.url,
                                        "find_interval_seconds": 0.2}})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    reader = Store.open(policy.database_url, fleet=policy.fleet)
    task = asyncio.create_task(sup.run())
    try:
        await wait_for(lambda: sup.launcher.state is EngineState.READY, timeout=30,
                       what="the container adopted")
        run = sup.launcher.run
        assert run.container_name == handle.name and run.pid == handle.pid
        assert sup.status_view.status().adopt["log"] == "the container's log"
        kill_members(handle)                      # its processes, from the host
        await wait_for(lambda: sup.launcher.state is EngineState.CRASHED, timeout=10,
                       what="the crash seen")
        t0 = time.monotonic()
        while True:
            await sup.writer.flush()
            if any(i.action == "would_restart" for i in reader.incidents()):
                break
            assert time.monotonic() - t0 < 10, "no would-be restart recorded"
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        assert maker.inspect(handle.id).status != "running"       # nothing was done
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{policy.admin.port}",
                                     timeout=10) as client:
            assert (await client.post("/api/actions/act", headers=auth())).status_code == 200
        await wait_for(lambda: sup.launcher.run is not run
                       and sup.launcher.state is EngineState.READY, timeout=30,
                       what="the container started again and adopted")
        again = maker.inspect(handle.id)
        assert again.status == "running" and sup.launcher.run.pid == again.pid != handle.pid
        await sup.writer.flush()
        kinds = [i.kind for i in reversed(reader.incidents())]
        assert "adopted_engine_stopped" in kinds and "adopted_engine_restarted" in kinds
    finally:
        sup.request_stop("test over")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        maker.remove(handle.id)
        maker.close()
        reader.close()

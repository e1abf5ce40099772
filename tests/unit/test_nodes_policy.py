"""Issue 16: the engine.nodes policy, each rank's argv and environment, and the GID index
resolved per node from its own GID table (tests/fixtures/sysfs/two-sparks, the sysfs layout
of two nodes whose RoCE v2 IPv4 GID sits at different indexes)."""

from __future__ import annotations

import pytest
import yaml

from agent_supervisor.act.node_argv import head_start_args, node_environment, rank_argv
from agent_supervisor.errors import PolicyError
from agent_supervisor.policy.load import load_policy
from agent_supervisor.policy.model import agent_token
from agent_supervisor.sense.gid import match_gid, resolve_gid_index
from tests.helpers.paths import FIXTURES

SYSFS = FIXTURES / "sysfs" / "two-sparks"


def _data(**distributed) -> dict:
    return {"fleet": "pair", "engine": {
        "executable": "vllm", "args": ["serve", "/models/x", "--tensor-parallel-size", "2"],
        "environment": {"NCCL_IB_HCA": "rocep1s0f1"},
        "nodes": [{"name": "spark-1", "address": "10.100.216.1",
                   "environment": {"NCCL_SOCKET_IFNAME": "enp1s0f1np1"}},
                  {"name": "spark-2", "address": "10.100.216.2", "agent_port": 8791,
                   "environment": {"NCCL_SOCKET_IFNAME": "enP2p1s0f1np1",
                                   "GLOO_SOCKET_IFNAME": "enP2p1s0f1np1"}}],
        "distributed": distributed},
        "modes": [{"name": "fast", "args": {"--max-num-seqs": 8}}]}


def test_issue_16_ranks_get_vllms_multi_node_flags() -> None:
    p = load_policy(yaml.safe_dump(_data()))
    head = rank_argv(p, p.modes[0], 0)
    worker = rank_argv(p, p.modes[0], 1)
    flags = ["--nnodes", "2", "--master-addr", "10.100.216.1", "--master-port", "29501"]
    for argv in (head, worker):
        assert all(f in argv for f in flags)
        assert argv[:5] == ["vllm", "serve", "/models/x", "--tensor-parallel-size", "2"]
    assert head[head.index("--node-rank") + 1] == "0" and "--headless" not in head
    assert worker[worker.index("--node-rank") + 1] == "1" and "--headless" in worker


def test_issue_16_ray_backend() -> None:
    p = load_policy(yaml.safe_dump(_data(backend="ray", ray_port=6380)))
    assert head_start_args(p) == (("--distributed-executor-backend", "ray"),)
    assert rank_argv(p, p.modes[0], 1) == [
        "ray", "start", "--block", "--address=10.100.216.1:6380",
        "--node-ip-address=10.100.216.2"]


def test_issue_16_one_box_gets_nothing_extra() -> None:
    data = _data()
    del data["engine"]["nodes"]
    p = load_policy(yaml.safe_dump(data))
    assert head_start_args(p) == () and node_environment(p, 0) == ({}, None)


def test_issue_16_gid_index_resolved_on_each_node_from_its_own_table() -> None:
    p = load_policy(yaml.safe_dump(_data()))
    head_env, _head_gid = node_environment(p, 0, sysfs=SYSFS / "head")
    worker_env, worker_gid = node_environment(p, 1, sysfs=SYSFS / "worker")
    assert head_env["NCCL_IB_GID_INDEX"] == "3" and worker_env["NCCL_IB_GID_INDEX"] == "5"
    assert head_env["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert worker_env["GLOO_SOCKET_IFNAME"] == "enP2p1s0f1np1"
    assert worker_env["VLLM_HOST_IP"] == "10.100.216.2"
    assert worker_gid is not None and worker_gid.hca == "rocep1s0f1" and worker_gid.port == 1


def test_issue_16_no_matching_gid_leaves_the_variable_unset() -> None:
    got = resolve_gid_index("10.100.216.9", root=SYSFS / "worker")
    assert got.index is None and "left unset" in got.note
    assert resolve_gid_index("10.0.0.1", root=SYSFS / "missing").index is None
    assert match_gid("10.100.216.2", [("mlx5_0", 1, 3, "::ffff:10.100.216.2",
                                       "IB/RoCE v1", None)]).index is None
    p = load_policy(yaml.safe_dump(_data(gid_index="unset")))
    env, gid = node_environment(p, 1, sysfs=SYSFS / "worker")
    assert "NCCL_IB_GID_INDEX" not in env and gid is None


@pytest.mark.parametrize("where", ["engine", "node"])
def test_issue_16_a_shared_gid_literal_is_refused(where: str) -> None:
    data = _data()
    env = data["engine"]["environment"] if where == "engine" else \
        data["engine"]["nodes"][1]["environment"]
    env["NCCL_IB_GID_INDEX"] = "3"
    with pytest.raises(PolicyError, match="resolved on each node at start"):
        load_policy(yaml.safe_dump(data))


def test_issue_16_bad_node_lists_are_refused() -> None:
    one = _data()
    one["engine"]["nodes"] = one["engine"]["nodes"][:1]
    with pytest.raises(PolicyError, match="two nodes or more"):
        load_policy(yaml.safe_dump(one))
    twice = _data()
    twice["engine"]["nodes"][1]["name"] = "spark-1"
    with pytest.raises(PolicyError, match="repeated: spark-1"):
        load_policy(yaml.safe_dump(twice))


def test_issue_16_agent_token_from_file_or_environment(tmp_path) -> None:
    (tmp_path / "agent.token").write_text("s3cret\n")
    p = load_policy(yaml.safe_dump(_data(agent_token_file="agent.token")), base_dir=tmp_path)
    assert agent_token(p, {}) == "s3cret"
    q = load_policy(yaml.safe_dump(_data()), base_dir=tmp_path)
    assert agent_token(q, {"SUPERVISOR_AGENT_TOKEN": "from-env"}) == "from-env"
    assert agent_token(q, {}) is None


@pytest.mark.parametrize(("case", "check"), [("clock_off_holds_the_start", "clocks"),
                                             ("agent_down_holds_the_start", "agent_answers")])
def test_issue_16_preflight_names_the_check_that_failed(case: str, check: str) -> None:
    from tests.helpers.field_cases import FIELD, load_case, play_case

    steps = play_case(load_case(FIELD / "preflight_failed" / f"{case}.yaml"))
    held = [f for _, d in steps for f in d.findings if f.kind == "preflight_failed"]
    assert held and all(f.evidence["check"] == check for f in held)
    assert held[0].evidence["node"] == "spark-2" and "start held" in held[0].summary
    assert all(d.action == "hold" for _, d in steps)

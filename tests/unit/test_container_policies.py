"""Issue 27 item 7: the three container policies a DGX Spark user starts from load, and
say what an operator relies on: the container runtime, an image, host networking, the GPU
requested, the ladder's ends, and for two Sparks both nodes with RDMA devices and
unlimited locked memory in the container every rank (the worker's too) is made from."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_supervisor.policy.load import load_policy_file
from agent_supervisor.policy.model import build_argv

POLICIES = Path(__file__).resolve().parents[2] / "policies"

#: file -> (engine kind, first rung, last rung)
CASES = {
    "gb10-vllm-container.yaml": ("vllm", "nvfp4-mtp3", "nvfp4-safe"),
    "gb10-llamacpp-container.yaml": ("llama_cpp", "q4-mtp3", "q4-safe"),
    "gb10-2x-spark-container.yaml": ("vllm", "tp2-dflash8", "tp2-safe"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_container_policy_loads_with_what_an_operator_relies_on(name: str) -> None:
    kind, first, last = CASES[name]
    policy = load_policy_file(POLICIES / name)
    engine = policy.engine
    container = engine.container
    assert engine.runtime == "container" and container is not None
    assert engine.kind == kind
    assert container.image and ":" in container.image     # a tag or a digest, never bare
    assert container.network_mode == "host"
    assert container.gpus == "all" or any(d.startswith("nvidia.com/gpu=")
                                          for d in container.devices)
    assert [policy.modes[0].name, policy.modes[-1].name] == [first, last]
    assert policy.modes[0].speculative and not policy.modes[-1].speculative
    # The command is the engine's own, never a container client.
    argv = build_argv(policy, policy.modes[policy.initial_rung])
    assert argv[0] not in ("docker", "podman", "nerdctl", "docker-compose")


def test_vllm_container_keeps_ngc_entrypoint_and_mounts_the_hf_cache() -> None:
    policy = load_policy_file(POLICIES / "gb10-vllm-container.yaml")
    container = policy.engine.container
    assert container is not None
    assert container.image.startswith("nvcr.io/nvidia/vllm:")
    assert container.entrypoint is None                  # NGC's runs `vllm serve` as given
    assert policy.engine.executable == "vllm" and policy.engine.args[0] == "serve"
    assert container.ipc_mode == "host"
    hf = [m for m in container.mounts if m.target == "/root/.cache/huggingface"]
    assert hf and hf[0].read_only
    assert policy.engine.environment["HF_HUB_OFFLINE"] == "1"


def test_llamacpp_container_clears_the_entrypoint_and_names_llama_server() -> None:
    policy = load_policy_file(POLICIES / "gb10-llamacpp-container.yaml")
    container = policy.engine.container
    assert container is not None
    assert container.entrypoint == []         # the image's is /app/llama-server
    assert policy.engine.executable == "/app/llama-server"


def test_two_spark_policy_has_two_nodes_and_rdma_in_every_rank_container() -> None:
    policy = load_policy_file(POLICIES / "gb10-2x-spark-container.yaml")
    engine = policy.engine
    container = engine.container
    assert container is not None
    head, worker = engine.nodes                # exactly two: the head first
    assert head.address != worker.address
    # The worker's agent runs its rank from the same container section.
    assert "/dev/infiniband" in container.devices
    memlock = {u.name: u for u in container.ulimits}["memlock"]
    assert (memlock.soft, memlock.hard) == (-1, -1)
    assert container.privileged is False
    for node in (head, worker):
        assert {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "GLOO_SOCKET_IFNAME",
                "TP_SOCKET_IFNAME"} <= set(node.environment)
        assert "NCCL_IB_GID_INDEX" not in node.environment
    dist = engine.distributed
    assert dist.backend == "mp" and dist.gid_index == "auto"
    assert dist.agent_token_file is not None
    # vllm/vllm-openai's entrypoint is `vllm serve`: cleared, pinned by digest.
    assert container.entrypoint == [] and "@sha256:" in container.image

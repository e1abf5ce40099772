"""``supervisor container-demo --policy FILE``: a process policy's engine, run as a container.

What ``make demo ENGINE_RUNTIME=container`` runs (issue 27). On this box, with no registry:

1. start podman's Docker Engine API service on a socket of the project's
   (``.podman/api.sock``, the project's ``containers.conf`` and storage;
   ``agent_supervisor.demo.podman``);
2. build the CPU engine's image once (a root filesystem whose programs are the host's,
   bind-mounted read-only: ``engine_mounts``);
3. write the policy again beside the original as ``.<name>.container.yaml`` with
   ``engine.runtime: container`` and that image, socket and mounts (same ladder, same
   everything else), check it like ``policy check`` does;
4. run the service on it until SIGTERM/SIGINT (``supervisor run``), then stop the API
   service (the engine's container is already gone: the service removes it at its stop).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from agent_supervisor.commands.helpfmt import HelpfulParser
from agent_supervisor.policy import load_policy_file

__all__ = ["add_parser", "container_policy", "run"]

SOCKET = Path(".podman/api.sock")


def add_parser(sub: Any) -> HelpfulParser:
    """The ``container-demo`` subcommand."""
    p: HelpfulParser = sub.add_parser(
        "container-demo", help="run a process policy's engine as a podman container of the "
        "project's (make demo ENGINE_RUNTIME=container)")
    p.add_argument("--policy", required=True, type=Path, help="a policy with "
                   "engine.runtime: process (policies/cpu-demo.yaml)")
    p.add_argument("--socket", type=Path, default=SOCKET,
                   help=f"the API service's socket (default {SOCKET})")
    return p


def container_policy(path: Path, *, image: str, api_socket: str,
                     mounts: list[dict[str, Any]]) -> Path:
    """Write ``path``'s policy with its engine in a container; returns the new file.

    The engine's executable and working directory are made absolute (the same paths hold
    inside the container: ``mounts`` bind them there). Raises PolicyError (the new file
    refused, naming it) or OSError."""
    data = yaml.safe_load(path.read_text())
    policy = load_policy_file(path)
    data["engine"] = {**data["engine"], "runtime": "container",
                      "executable": policy.engine_executable,
                      "working_directory": str(policy.working_directory),
                      "container": {"image": image, "api_socket": api_socket,
                                    "ipc_mode": "host", "mounts": mounts}}
    out = path.with_name(f".{path.stem}.container.yaml")
    out.write_text(f"# Written by supervisor container-demo from {path.name}: edit that.\n"
                   + yaml.safe_dump(data, sort_keys=False))
    load_policy_file(out)
    return out


def run(args: argparse.Namespace) -> int:
    """``supervisor container-demo``. Raises SetupError (podman missing, the service or the
    image build failed)."""
    import uvloop

    from agent_supervisor.commands.run import run_service
    from agent_supervisor.demo import podman as pm

    service = pm.start_service(args.socket)
    try:
        pm.build_engine_image()
        policy = load_policy_file(args.policy)
        root = policy.working_directory
        mounts = [m.model_dump() for m in pm.engine_mounts(
            engine_venv=root / ".engine-venv", models=root / ".demo-models")]
        path = container_policy(args.policy, image=pm.ENGINE_IMAGE, api_socket=service.url,
                                mounts=mounts)
        print(f"engine in a container: {pm.ENGINE_IMAGE} through {service.url} "
              f"(policy {path})")
        return uvloop.run(run_service(load_policy_file(path), None, path))
    finally:
        service.stop()

"""The policy's ``engine`` section: how to launch the engine (every mode shares it; the
modes add arguments), where it listens, how long a start and a stop may take, and where
it runs (one box or several, a process or a container, or an adopted engine)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from agent_supervisor.policy.adopt import AdoptSpec, check_adopt, fill_engine_url
from agent_supervisor.policy.base import MAX_SECONDS, Delay, PolicyModel, Seconds
from agent_supervisor.policy.container import ContainerSpec, check_runtime
from agent_supervisor.policy.engine_flags import EngineKind, flag_rules
from agent_supervisor.policy.nodes import DistributedSpec, NodeSpec, check_nodes

__all__ = ["EngineSpec"]


class EngineSpec(PolicyModel):
    """How to launch the engine. Every mode shares these; modes add arguments."""

    kind: EngineKind = "vllm"
    """Which engine this is: ``vllm`` or ``llama_cpp`` (llama.cpp's ``llama-server``). It
    picks the engine profile: the flags the supervisor adds, how speculation shows in the
    modes' flags, the metric names, probes and log signatures
    (``agent_supervisor.policy.engine_flags``, ``agent_supervisor.sense.profiles``)."""
    executable: Annotated[str, Field(min_length=1)]
    """Program to run: a path (``.engine-venv/bin/python``, ``/opt/vllm/bin/vllm``) or a
    name looked up on PATH. Never run through a shell."""
    args: list[str] = []
    """Arguments right after the executable, verbatim (``[serve, /models/x]`` or
    ``[-m, vllm.entrypoints.openai.api_server, --model, DIR]``)."""
    environment: dict[str, str] = {}
    """The engine's own variables, on top of the few it inherits from the supervisor's
    environment (``act/engine_env.py``: never a secret-looking name nor a vLLM
    development-mode switch unless set here). Values may use ``${NAME}``."""
    api_key_file: str | None = None
    """A file holding the key the engine requires (given to it as ``VLLM_API_KEY``, kept
    out of its argument vector). A systemd credential ``engine_api_key`` wins."""
    working_directory: str = "."
    """The engine's working directory, relative to the policy file's directory (default
    ``.``: that directory). ``executable`` and relative paths in the engine's arguments
    resolve against it."""
    host: str = "127.0.0.1"
    """Address the engine's HTTP server listens on, given to it as ``--host``; the
    supervisor probes it and the gateway forwards to it there."""
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    """Port of the engine's HTTP server, given to it as ``--port``."""
    start_timeout_seconds: Seconds = 300.0
    """From launch to ``/health`` 200; past it the start counts as failed."""
    shutdown_timeout_seconds: Annotated[int, Field(ge=0, le=MAX_SECONDS)] = 30
    """Passed as vLLM's ``--shutdown-timeout``: on SIGTERM it drains in-flight requests
    for up to this long."""
    stop_grace_seconds: Delay = 10.0
    """Extra wait after ``shutdown_timeout_seconds`` before SIGKILL to the whole group."""
    kill_timeout_seconds: Seconds = 10.0
    """How long every process of the group gets to vanish after SIGKILL."""
    nodes: list[NodeSpec] = []
    """One engine across boxes: its nodes, the head first (at least two; ``policy/nodes.py``).
    ``[]``: one box."""
    distributed: DistributedSpec = DistributedSpec()
    runtime: Literal["process", "container"] = "process"
    """``process``: the engine is the supervisor's child, in a process group of its own.
    ``container``: it runs in the container that ``container`` describes, through the Docker
    Engine API."""
    container: ContainerSpec | None = None
    """The engine's container: required with ``runtime: container``, refused with ``runtime:
    process``."""
    adopt: AdoptSpec | None = None
    """An engine the supervisor did not start, found by a selector and watched instead of
    launching one (``policy/adopt.py``; issue 31). None: the supervisor launches its own."""
    _url = model_validator(mode="before")(fill_engine_url)
    _nodes = model_validator(mode="after")(check_nodes)
    _runtime = model_validator(mode="after")(check_runtime)
    _adopt = model_validator(mode="after")(check_adopt)

    @field_validator("args")
    @classmethod
    def _no_reserved_flags(cls, args: list[str], info: ValidationInfo) -> list[str]:
        flag_rules(info.data.get("kind", "vllm")).check_engine_args(args)
        return args

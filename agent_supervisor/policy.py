"""The fleet policy: one YAML file per agent fleet, validated by frozen pydantic models.

The YAML keys are the field names below (snake_case, no aliases); unknown keys are an
error, so a typo fails instead of being ignored. Durations are float seconds named
``*_seconds``. Relative paths in the file (``engine.working_directory``,
``storage.state_directory``, a ``sqlite:///`` database path) are relative to the
directory holding the policy file; ``engine.executable`` and relative paths inside the
engine's arguments are relative to ``engine.working_directory``.

``load_policy(text)`` is pure (text in, Policy out); ``load_policy_file(path)`` reads the
file and remembers its directory. Both raise ``PolicyError`` naming the file, the field
(dotted path, e.g. ``modes[1].args``), the value and the reason.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from agent_supervisor.engine_flags import EngineKind, flag_rules
from agent_supervisor.errors import PolicyError
from agent_supervisor.policy_base import MAX_SECONDS, POLICY_CONFIG, Delay, Seconds
from agent_supervisor.policy_container import ContainerSpec, check_runtime
from agent_supervisor.policy_guards import (
    AdminSpec,
    AlertSpec,
    GatewayLimits,
    GatewaySpec,
    Guards,
    Hysteresis,
    LifecycleSpec,
    RecoverySpec,
    Restart,
    Sampling,
    Storage,
)
from agent_supervisor.policy_nodes import DistributedSpec, NodeSpec, check_nodes
from agent_supervisor.policy_paths import default_state_directory
from agent_supervisor.policy_spec import TopRungSpec, check_flag_value
from agent_supervisor.policy_yaml import interpolate, parse_yaml, validation_problems

__all__ = ["ArgValue", "EngineSpec", "Mode", "Policy", "Restart", "Sampling", "StartupFallback",
           "Storage", "agent_token", "build_argv", "load_policy", "load_policy_file",
           "needs_restart", "render_args", "with_state_default"]

#: Flags the supervisor sets itself from ``engine.host``, ``engine.port`` and
#: ``engine.shutdown_timeout_seconds``; a policy may not set them in arguments.
RESERVED_FLAGS = ("--host", "--port", "--shutdown-timeout")

#: A mode argument's value: ``true`` emits the bare flag, ``false``/``null`` omits it,
#: a mapping or list is emitted as compact JSON (``--speculative-config``), anything
#: else as its string form.
ArgValue = str | int | float | bool | dict[str, Any] | list[Any] | None

_NAME = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class _Model(BaseModel):
    model_config = POLICY_CONFIG


class EngineSpec(_Model):
    """How to launch the engine. Every mode shares these; modes add arguments."""

    kind: EngineKind = "vllm"
    """Which engine this is: ``vllm`` or ``llama_cpp`` (llama.cpp's ``llama-server``). It
    picks the engine profile: the flags the supervisor adds, how speculation shows in the
    modes' flags, the metric names, probes and log signatures (``agent_supervisor.engine_flags``,
    ``agent_supervisor.sense.profiles``)."""
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
    """One engine across boxes: its nodes, the head first (at least two; ``policy_nodes``).
    ``[]``: one box."""
    distributed: DistributedSpec = DistributedSpec()
    runtime: Literal["process", "container"] = "process"
    """``process``: the engine is the supervisor's child, in a process group of its own.
    ``container``: it runs in the container that ``container`` describes, through the Docker
    Engine API."""
    container: ContainerSpec | None = None
    """The engine's container: required with ``runtime: container``, refused with ``runtime:
    process``."""
    _nodes = model_validator(mode="after")(check_nodes)
    _runtime = model_validator(mode="after")(check_runtime)

    @field_validator("args")
    @classmethod
    def _no_reserved_flags(cls, args: list[str], info: ValidationInfo) -> list[str]:
        flag_rules(info.data.get("kind", "vllm")).check_engine_args(args)
        return args


#: Start-up failure classes a fallback can answer (tags of agent_supervisor.sense.engine_log).
FallbackClass = Literal["insufficient_memory_at_startup", "cuda_graph_capture_oom",
                        "out_of_memory"]


class StartupFallback(_Model):
    """One corrective retry of a failed start, tried at most once per start of the mode:
    ``args``, ``lower_memory`` or both."""

    on: FallbackClass
    """The start-up failure this retry answers, as the engine log shows it:
    ``insufficient_memory_at_startup``, ``cuda_graph_capture_oom`` or ``out_of_memory``."""
    args: dict[str, ArgValue] = {}
    """Flags that override the mode's arguments for the retry (``{--enforce-eager: true}``),
    checked as the mode's are."""
    lower_memory: bool = False
    """True: size ``--gpu-memory-utilization`` (or ``--kv-cache-memory-bytes`` when the mode
    sets that) from the MemAvailable recorded before the failed launch, less
    ``lifecycle.fallback_margin_bytes``."""

    @model_validator(mode="after")
    def _something(self) -> StartupFallback:
        if not self.args and not self.lower_memory:
            raise ValueError("a startup fallback needs args or lower_memory: true")
        for flag in self.args:
            check_flag_value(flag, self.args[flag])
        return self


#: What a mode without ``startup_fallbacks`` retries with. CUDA-graph capture OOM: smaller
#: capture sizes first, then eager mode, before any memory is given up (vllm #15598: "If you
#: don't use --enforce-eager, CUDA graph is recorded ... this takes up extra memory";
#: vllm's own hint 'consider decreasing gpu_memory_utilization or switching to eager
#: mode', #14447). Too little free memory at start: fit the utilisation to what is free
#: (vllm #48140, #33297).
DEFAULT_STARTUP_FALLBACKS: tuple[StartupFallback, ...] = (
    StartupFallback(on="cuda_graph_capture_oom", args={"--max-cudagraph-capture-size": 16}),
    StartupFallback(on="cuda_graph_capture_oom", args={"--enforce-eager": True}),
    StartupFallback(on="cuda_graph_capture_oom", lower_memory=True),
    StartupFallback(on="insufficient_memory_at_startup", lower_memory=True),
    StartupFallback(on="out_of_memory", lower_memory=True),
)


class Mode(_Model):
    """One rung of the ladder: a named engine configuration."""

    name: Annotated[str, Field(pattern=_NAME)]
    """The rung's name ([a-z0-9._-], at most 63 characters, unique in the ladder): what
    ``initial_mode``, the CLI, the records and the metrics call it."""
    description: str = ""
    """Free text for operators."""
    args: dict[str, ArgValue] = {}
    """vLLM flags spelled as vLLM spells them, e.g. ``--max-num-seqs: 4``,
    ``--speculative-config: {method: mtp, num_speculative_tokens: 2}``."""
    gateway: GatewayLimits = GatewayLimits()
    """Admission limits in this mode; changing only these needs no restart."""
    startup_fallbacks: list[StartupFallback] | None = None
    """Corrective retries of a failed start, in order; None: ``DEFAULT_STARTUP_FALLBACKS``
    (vLLM; none for llama-server, whose flags differ), ``[]``: none (a failed start is
    then an ordinary crash)."""

    _kind: str = PrivateAttr(default="vllm")   # the policy's engine.kind (Policy._ladder)

    @property
    def fallbacks(self) -> tuple[StartupFallback, ...]:
        """The fallbacks in effect for this mode."""
        if self.startup_fallbacks is None:
            return DEFAULT_STARTUP_FALLBACKS if self._kind == "vllm" else ()
        return tuple(self.startup_fallbacks)

    @field_validator("args")
    @classmethod
    def _flags(cls, args: dict[str, ArgValue]) -> dict[str, ArgValue]:
        for flag in args:
            if not re.fullmatch(r"--[a-z0-9][a-z0-9-]*", flag):
                raise ValueError(f"{flag!r} is not a long flag like --max-num-seqs")
            if flag in RESERVED_FLAGS:
                raise ValueError(f"{flag} is set by the supervisor from the engine section")
            check_flag_value(flag, args[flag])
        return args

    @property
    def speculative(self) -> bool:
        """True when this mode turns on speculative decoding: vLLM's
        ``--speculative-config``, llama-server's ``--spec-type``/``--model-draft``/lookup
        caches (``engine_flags.FlagRules.speculative``)."""
        return flag_rules(self._kind).speculative(self.args)


class Policy(_Model):
    """A validated fleet policy. Build it with ``load_policy`` or ``load_policy_file``."""

    fleet: Annotated[str, Field(pattern=_NAME)]
    """Name of the agent fleet this policy serves ([a-z0-9._-], at most 63 characters),
    stored with every record."""
    description: str = ""
    """Free text for operators."""
    engine: EngineSpec
    modes: Annotated[list[Mode], Field(min_length=1)]
    """The ladder, ordered fastest first, safest last."""
    initial_mode: str | None = None
    """Mode to start in; default the first (fastest)."""
    mode: Literal["act", "advise"] = "act"
    """What the supervisor does with its decisions (not a rung of ``modes``). ``act``:
    carry them out. ``advise``: sense, decide, record and alert as ever, but act on
    nothing (no kill, restart, step or shed; the gateway passes through): each decision
    is recorded as what it would have done (an incident whose action is ``would_*``).
    The engine is still launched once; after a crash it stays down and a hung one is not
    killed. ``supervisor run --advise`` and the ``supervisor act`` / ``advise`` levers
    switch it while the service runs (agent_supervisor/act/advice.py)."""
    restart: Restart = Restart()
    guards: Guards = Guards()
    lifecycle: LifecycleSpec = LifecycleSpec()
    hysteresis: Hysteresis = Hysteresis()
    gateway: GatewaySpec = GatewaySpec()
    admin: AdminSpec = AdminSpec()
    alerts: AlertSpec = AlertSpec()
    recovery: RecoverySpec = RecoverySpec()
    sampling: Sampling = Sampling()
    storage: Storage = Storage()
    top_rung: TopRungSpec = TopRungSpec()
    """Which speculative mode is the top of the ladder, chosen by the traffic (issue 32,
    agent_supervisor/decide/top_rung.py). Not yet read by ``supervisor run``: the choice
    is replayed and tested, not wired into the live ladder."""

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)

    @model_validator(mode="after")
    def _ladder(self) -> Policy:
        names = [m.name for m in self.modes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"modes: names must be unique, repeated: {', '.join(dupes)}")
        ports = {(self.engine.host, self.engine.port): "engine.port"}
        for name, spec in (("gateway", self.gateway), ("admin", self.admin)):
            if spec.enabled and (spec.host, spec.port) in ports:
                raise ValueError(f"{name}.port {spec.port} is also {ports[(spec.host, spec.port)]}")
            ports[(spec.host, spec.port)] = f"{name}.port"
        if self.storage.database_url is not None and self.storage.database_url_file:
            raise ValueError("storage: database_url and database_url_file: set one, not both")
        if self.gateway.auth == "keys" and not self.gateway.api_keys:
            raise ValueError("gateway.auth is keys but gateway.api_keys is empty")
        rules = flag_rules(self.engine.kind)
        for i, mode in enumerate(self.modes):
            mode._kind = self.engine.kind
            try:
                rules.check_mode(mode.args)
            except ValueError as exc:
                raise ValueError(f"modes[{i}].args: {exc}") from None
        if self.initial_mode is not None and self.initial_mode not in names:
            raise ValueError(f"initial_mode {self.initial_mode!r} is not one of the modes: "
                             f"{', '.join(names)}")
        return self

    @property
    def base_dir(self) -> Path:
        """Directory the policy's relative paths are resolved against."""
        return self._base_dir

    def first_rung_sparing_large_batches_below(self, rung: int) -> int | None:
        """The first rung after ``rung`` without speculation on large batches (none at all,
        or vLLM's dynamic k at 0 for its largest batch sizes), or None."""
        rules = flag_rules(self.engine.kind)
        return next((i for i in range(rung + 1, len(self.modes))
                     if rules.spares_large_batches(self.modes[i].args)), None)

    def first_plain_rung_below(self, rung: int) -> int | None:
        """The first rung after ``rung`` without speculative decoding, or None."""
        for i in range(rung + 1, len(self.modes)):
            if not self.modes[i].speculative:
                return i
        return None

    def max_num_seqs(self, rung: int) -> int | None:
        """The sequences cap (vLLM ``--max-num-seqs``, llama-server ``--parallel``/``-np``)
        in the argument vector the engine gets at ``rung`` (``build_argv``; the last one
        wins, as with argparse), or None: the engine's default."""
        return flag_rules(self.engine.kind).sequences_cap(build_argv(self, self.modes[rung]))

    def first_rung_with_fewer_sequences_below(self, rung: int) -> int | None:
        """The first rung after ``rung`` whose ``--max-num-seqs`` is known and lower than
        ``rung``'s (any known value when ``rung``'s is vLLM's default), or None."""
        current = self.max_num_seqs(rung)
        for i in range(rung + 1, len(self.modes)):
            seqs = self.max_num_seqs(i)
            if seqs is not None and (current is None or seqs < current):
                return i
        return None

    @property
    def initial_rung(self) -> int:
        """Index of the mode to start in (0 = fastest)."""
        if self.initial_mode is None:
            return 0
        return [m.name for m in self.modes].index(self.initial_mode)

    def mode_index(self, name: str) -> int:
        """Rung of the mode called ``name``. Raises KeyError if there is none."""
        for i, mode in enumerate(self.modes):
            if mode.name == name:
                return i
        raise KeyError(name)

    def resolve(self, path: str) -> Path:
        """``path`` made absolute against the policy file's directory."""
        p = Path(path).expanduser()
        # normpath, not resolve(): a venv's bin/python is a symlink that must stay one.
        return p if p.is_absolute() else Path(os.path.normpath(self._base_dir / p))

    @property
    def working_directory(self) -> Path:
        """The engine's working directory, absolute."""
        return self.resolve(self.engine.working_directory)

    @property
    def state_directory(self) -> Path:
        """Where the database and the engine logs live, absolute."""
        return self.resolve(self.storage.state_directory)

    def secret(self, name: str, path: str | None,
               environ: Mapping[str, str] | None = None) -> str | None:
        """A secret kept out of the policy: the systemd credential ``name`` (a file in
        ``$CREDENTIALS_DIRECTORY``, from ``LoadCredential=``) if there is one, else the
        file ``path`` (relative to the policy file), else None. Trailing whitespace is
        stripped.

        Raises: ``PolicyError`` naming the option and the file, never its content.
        """
        env = os.environ if environ is None else environ
        creds = env.get("CREDENTIALS_DIRECTORY")
        candidates = [Path(creds) / name] if creds and (Path(creds) / name).is_file() else []
        if not candidates and path is not None:
            candidates = [self.resolve(path)]
        for file in candidates:
            try:
                return file.read_text(encoding="utf-8").strip() or None
            except (OSError, UnicodeDecodeError) as exc:
                why = getattr(exc, "strerror", None) or "not UTF-8 text"
                raise PolicyError(str(file), message=f"{name}: cannot read the secret "
                                  f"file: {why}") from None
        return None

    def engine_api_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The engine's API key from ``engine.api_key_file`` or the ``engine_api_key``
        credential, or None."""
        return self.secret("engine_api_key", self.engine.api_key_file, environ)

    @property
    def webhook_url(self) -> str | None:
        """``alerts.webhook_url``, or the ``webhook_url`` credential or
        ``alerts.webhook_url_file`` (read on use: never stored on the policy)."""
        return self.secret("webhook_url", self.alerts.webhook_url_file) or \
            self.alerts.webhook_url

    @property
    def database_url(self) -> str:
        """The SQLAlchemy URL (the ``database_url`` credential, ``database_url_file`` or
        ``database_url``), with a relative SQLite path made absolute.

        Raises: ``PolicyError`` when the file cannot be read."""
        url = self.secret("database_url", self.storage.database_url_file) or \
            self.storage.database_url
        if url is None:
            return f"sqlite:///{self.state_directory / 'supervisor.db'}"
        prefix = "sqlite:///"
        if url.startswith(prefix) and not url.startswith(prefix + "/") and url != prefix:
            return prefix + str(self.resolve(url[len(prefix):]))
        return url

    @property
    def engine_executable(self) -> str:
        """``engine.executable``, made absolute against the working directory if it is a path."""
        exe = self.engine.executable
        if "/" in exe and not exe.startswith("/"):
            return os.path.normpath(self.working_directory / exe)
        return exe


def render_args(args: dict[str, ArgValue]) -> list[str]:
    """A mode's argument mapping as an argument vector (see ``ArgValue`` for the rules)."""
    argv: list[str] = []
    for flag, value in args.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, dict | list):
            argv += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            argv += [flag, str(value)]
    return argv


def build_argv(policy: Policy, mode: Mode,
               overrides: Iterable[tuple[str, ArgValue]] = ()) -> list[str]:
    """The engine's full argument vector for ``mode``: never a shell string.

    Shape: ``[executable, *engine.args, *mode.args, --host H, --port P, <tail>]``, the
    tail by engine kind (``engine_flags.FlagRules.tail``): vLLM ``--shutdown-timeout N``
    (engine/arg_utils.py: on SIGTERM the server drains in-flight requests for up to N
    seconds), llama-server ``--metrics``. ``overrides`` (a start-up fallback's flags)
    replace or extend the mode's arguments.
    """
    eng = policy.engine
    return [
        policy.engine_executable,
        *eng.args,
        *render_args({**mode.args, **dict(overrides)}),
        *flag_rules(eng.kind).tail(eng.host, eng.port, eng.shutdown_timeout_seconds),
    ]


def needs_restart(a: Mode, b: Mode) -> bool:
    """Whether switching from mode ``a`` to ``b`` needs a new engine process.

    Every engine argument (speculative config, ``--max-model-len``, memory settings) is
    fixed at launch in vLLM, so any difference in rendered arguments needs a restart.
    """
    return render_args(a.args) != render_args(b.args)


# -- loading: text or file in, a validated Policy out (below: policy_yaml, policy_paths) --

def load_policy(text: str, *, source: str = "<string>", base_dir: Path | None = None,
                environ: dict[str, str] | None = None) -> Policy:
    """Parse and validate one policy document.

    Args: ``text`` the YAML; ``source`` the name used in error messages; ``base_dir`` the
    directory relative paths are resolved against (default: the current directory);
    ``environ`` the variables ``${NAME}`` in string values is replaced from (default:
    none, so a pure call stays pure; ``load_policy_file`` passes ``os.environ``).
    Returns: a frozen ``Policy``.
    Raises: ``PolicyError`` for YAML syntax errors (with line and column), duplicate keys,
    nesting past ``MAX_YAML_DEPTH``, aliases expanding past ``MAX_YAML_NODES``, an unset
    ``${NAME}``, and every validation problem (field as a dotted path, the reason, and
    the value only where it cannot be a secret). Non-finite numbers (``inf``, ``nan``)
    are refused everywhere. Validation is strict (issue 33): a quoted number or boolean
    is refused as a string, and an integer field takes no float (``8080.0``).
    """
    data = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise PolicyError(source, message="must be a YAML mapping with fleet, engine and modes")
    data = interpolate(data, "", source, environ or {})
    try:
        policy = Policy.model_validate(data, strict=True)
    except ValidationError as exc:
        raise PolicyError(source, validation_problems(exc)) from None
    except RecursionError:
        raise PolicyError(source, message="nested too deeply") from None
    policy._base_dir = Path(os.path.abspath(base_dir or Path.cwd()))
    return policy


def load_policy_file(path: str | Path, environ: Mapping[str, str] | None = None) -> Policy:
    """Read and validate a policy file; relative paths resolve against its directory,
    ``${NAME}`` resolves from the process environment; an unset state directory defaults
    from ``environ`` (default ``os.environ``; ``with_state_default``).

    Raises: ``PolicyError`` (file unreadable, not UTF-8, invalid YAML, invalid policy).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise PolicyError(str(p), message=f"cannot read: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise PolicyError(str(p), message=f"not UTF-8 text: byte 0x{raw[exc.start]:02x} "
                          f"on line {line}") from None
    policy = load_policy(text, source=str(p), base_dir=p.parent, environ=dict(os.environ))
    return with_state_default(policy, p, environ)


def with_state_default(policy: Policy, policy_path: Path,
                       environ: Mapping[str, str] | None = None) -> Policy:
    """``policy`` with ``storage.state_directory`` set to
    ``policy_paths.default_state_directory`` (``environ``: default ``os.environ``) when the
    file left it unset and a default applies; else ``policy`` itself."""
    if "state_directory" in policy.storage.model_fields_set:
        return policy
    default = default_state_directory(policy_path, policy.fleet,
                                      os.environ if environ is None else environ)
    if default is None:
        return policy
    storage = policy.storage.model_copy(update={"state_directory": str(default)})
    return policy.model_copy(update={"storage": storage})


def agent_token(policy: Policy, environ: Mapping[str, str] | None = None) -> str | None:
    """The agents' bearer token (``engine.distributed``, agent_supervisor/policy_nodes.py):
    the systemd credential ``agent_token``, else ``engine.distributed.agent_token_file``,
    else ``$agent_token_env``; None: none set.
    Raises PolicyError when the file cannot be read (named, never its content)."""
    env = os.environ if environ is None else environ
    spec = policy.engine.distributed
    return policy.secret("agent_token", spec.agent_token_file, env) or \
        env.get(spec.agent_token_env) or None

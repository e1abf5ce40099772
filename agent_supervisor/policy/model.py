"""The fleet policy: one YAML file per agent fleet, validated by frozen pydantic models.

The YAML keys are the field names below (snake_case, no aliases); unknown keys are an
error, so a typo fails instead of being ignored. Durations are float seconds named
``*_seconds``. Relative paths in the file (``engine.working_directory``,
``storage.state_directory``, a ``sqlite:///`` database path) are relative to the
directory holding the policy file; ``engine.executable`` and relative paths inside the
engine's arguments are relative to ``engine.working_directory``.

The policy is built by ``agent_supervisor.policy.load`` (``load_policy``,
``load_policy_file``); its sections live in the modules beside this one (the package map
is in ``agent_supervisor/policy/__init__.py``). Here: the ladder (``Mode``, its start-up
fallbacks), the whole ``Policy`` with its cross-section checks and helpers, and the
engine's argument vector built from a mode.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from agent_supervisor.errors import PolicyError
from agent_supervisor.policy.base import PolicyModel
from agent_supervisor.policy.engine import EngineSpec
from agent_supervisor.policy.engine_flags import flag_rules
from agent_supervisor.policy.gateway import GatewayLimits, GatewaySpec
from agent_supervisor.policy.guards import Guards, LifecycleSpec
from agent_supervisor.policy.sections import (
    AdminSpec,
    AlertSpec,
    Hysteresis,
    RecoverySpec,
    Restart,
    Sampling,
    Storage,
)
from agent_supervisor.policy.speculative import TopRungSpec, check_flag_value

__all__ = ["DEFAULT_STARTUP_FALLBACKS", "RESERVED_FLAGS", "ArgValue", "Mode", "Policy",
           "StartupFallback", "agent_token", "build_argv", "needs_restart", "render_args"]

#: Flags the supervisor sets itself from ``engine.host``, ``engine.port`` and
#: ``engine.shutdown_timeout_seconds``; a policy may not set them in arguments.
RESERVED_FLAGS = ("--host", "--port", "--shutdown-timeout")

#: A mode argument's value: ``true`` emits the bare flag, ``false``/``null`` omits it,
#: a mapping or list is emitted as compact JSON (``--speculative-config``), anything
#: else as its string form.
ArgValue = str | int | float | bool | dict[str, Any] | list[Any] | None

_NAME = r"^[a-z0-9][a-z0-9._-]{0,62}$"


#: Start-up failure classes a fallback can answer (tags of agent_supervisor.sense.engine_log).
FallbackClass = Literal["insufficient_memory_at_startup", "cuda_graph_capture_oom",
                        "out_of_memory"]


class StartupFallback(PolicyModel):
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


class Mode(PolicyModel):
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


class Policy(PolicyModel):
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
    agent_supervisor/decide/top_rung.py): ``supervisor run`` reads it with ``enabled``;
    ``supervisor replay TRACE --top-rung`` always."""

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source_sha256: str | None = PrivateAttr(default=None)

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
        top = self.top_rung
        unknown = sorted({*top.modes, *(() if top.figures is None else (
            *top.figures.tokens_per_second, *top.figures.start_seconds))} - set(names))
        if unknown:
            raise ValueError(f"top_rung: {', '.join(unknown)} not one of the modes")
        if self.initial_mode is not None and self.initial_mode not in names:
            raise ValueError(f"initial_mode {self.initial_mode!r} is not one of the modes: "
                             f"{', '.join(names)}")
        return self

    @property
    def base_dir(self) -> Path:
        """Directory the policy's relative paths are resolved against."""
        return self._base_dir

    @property
    def source_sha256(self) -> str | None:
        """sha256 (hex) of the exact bytes ``load_policy_file`` validated; None: not
        from a file. The gateway process refuses a reload whose file differs (issue 30)."""
        return self._source_sha256

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



def agent_token(policy: Policy, environ: Mapping[str, str] | None = None) -> str | None:
    """The agents' bearer token (``engine.distributed``, agent_supervisor/policy/nodes.py):
    the systemd credential ``agent_token``, else ``engine.distributed.agent_token_file``,
    else ``$agent_token_env``; None: none set.
    Raises PolicyError when the file cannot be read (named, never its content)."""
    env = os.environ if environ is None else environ
    spec = policy.engine.distributed
    return policy.secret("agent_token", spec.agent_token_file, env) or \
        env.get(spec.agent_token_env) or None

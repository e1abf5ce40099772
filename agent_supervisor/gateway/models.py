"""``/v1/models`` while the engine does not serve (issue 33): answered from the policy.

Agent frameworks list the models at start-up (the OpenAI SDK's ``models.list()``, Codex
CLI, LangChain's model pickers) and time out or hang when that list is held until the
engine is ready (3.3 s on the CPU engine, minutes for a large model). So while the
gateway holds (the engine starting or being switched) it answers ``GET /v1/models``
itself, at once, with the names the engine will serve, read from the current mode's
argument vector (``policy.build_argv``):

- vLLM: ``--served-model-name`` (one or more names), else ``--model``, else the
  positional model of ``vllm serve MODEL`` (vllm/entrypoints/openai/cli_args.py: the
  served name defaults to the model);
- llama-server: ``--alias``/``-a``, else ``--model``/``-m`` (tools/server/server.cpp
  lists ``params.model_alias`` or the model's path).

Each model object carries ``"supervisor": {"mode", "rung", "held", "shed",
"engine_ready": false}`` as the engine's answer does once it serves
(agent_supervisor/gateway/visibility.py). With no name to be found in the arguments the
request is held as before. Once the engine serves, its own answer is forwarded.

**Aliases** (``gateway.model_aliases: {alias: served name}``): a generation request
whose JSON ``model`` is an alias is forwarded with the served name (the body
re-serialised; chat and text completions, Responses, Anthropic messages, embeddings
alike), and ``/v1/models``, the engine's answer or the policy's, lists each alias whose
target is served, as a copy of its target's object with the alias as ``id`` (as LiteLLM
lists ``model_group_alias`` entries in ``/models``, BerriAI/litellm#5524). The answer's
``model`` is left as the engine says: it names what served the request, which logs and
cost tracking read; LiteLLM's proxy did the same until v1.81.7 and has overwritten it
with the requested name since (BerriAI/litellm#19943, disputed in #22709), and leaving
it costs nothing on a stream. The token counters that name a model (``/tokenize``,
``/detokenize``, Anthropic's ``/v1/messages/count_tokens``: vLLM checks the name and
answers 404 for one it does not serve, vllm/entrypoints/serve/tokenize/) get the same
rewrite (``aliased_read``): Claude Code counts tokens under the name it was configured
with before it sends the request itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from agent_supervisor.gateway.visibility import supervisor_mark
from agent_supervisor.policy.model import build_argv

if TYPE_CHECKING:
    from agent_supervisor.gateway.view import GatewayView

__all__ = ["ALIASED_READS", "MODELS_PATH", "aliased", "aliased_read", "engine_models",
           "policy_models", "served_names"]

MODELS_PATH = "/v1/models"
#: Passed-through paths whose JSON body names a model (vLLM 0.32.0's TokenizeRequest,
#: DetokenizeRequest and the Anthropic count_tokens request all carry ``model``).
ALIASED_READS = frozenset({"/tokenize", "/detokenize", "/v1/messages/count_tokens"})

_NAME_FLAGS = {"vllm": (("--served-model-name",), ("--model",)),
               "llama_cpp": (("--alias", "-a"), ("--model", "-m"))}
_OWNED_BY = {"vllm": "vllm", "llama_cpp": "llamacpp"}


def _values(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """The values of the last of ``names`` in ``argv`` (``--f a b``, ``--f=a``)."""
    found: list[str] = []
    for i, arg in enumerate(argv):
        flag, eq, inline = arg.partition("=")
        if flag not in names:
            continue
        if eq:
            found = [inline]
            continue
        found = []
        for nxt in argv[i + 1:]:
            if nxt.startswith("-"):
                break
            found.append(nxt)
    return found


def served_names(kind: str, argv: Sequence[str]) -> list[str]:
    """The model names an engine of ``kind`` started with ``argv`` (without the
    executable) serves; [] when they cannot be told from the arguments. Pure."""
    names, model = _NAME_FLAGS.get(kind, _NAME_FLAGS["vllm"])
    found = _values(argv, names)
    if found:
        return found if kind == "vllm" else found[:1]
    found = _values(argv, model)
    if found:
        return found[:1]
    if kind == "vllm" and "serve" in argv:
        i = list(argv).index("serve")
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            return [argv[i + 1]]
    return []


def policy_models(gw: GatewayView) -> Response | None:
    """The gateway's own ``/v1/models`` answer for the current mode, or None when no
    name can be told from the policy (the request then waits for the engine)."""
    policy = gw.policy
    names = served_names(policy.engine.kind, build_argv(policy, policy.modes[gw.rung])[1:])
    if not names:
        return None
    mark = {**supervisor_mark(gw), "engine_ready": False}
    created = int(time.time())
    data: list[dict[str, Any]] = [
        {"id": name, "object": "model", "created": created,
         "owned_by": _OWNED_BY.get(policy.engine.kind, "vllm"), "supervisor": mark}
        for name in dict.fromkeys(names)]
    _add_aliases(gw, data)
    return Response(json.dumps({"object": "list", "data": data}),
                    media_type="application/json", headers={"Cache-Control": "no-store"})


def aliased(gw: GatewayView, body: dict[str, Any], raw: bytes) -> bytes:
    """``raw`` with an aliased ``model`` replaced by its served name (``body`` too), or
    ``raw`` itself when its model is no alias."""
    aliases = gw.spec.model_aliases
    model = body.get("model")
    if not aliases or not isinstance(model, str) or model not in aliases:
        return raw
    body["model"] = aliases[model]
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def aliased_read(gw: GatewayView, raw: bytes) -> bytes:
    """``raw``, the body of one of ``ALIASED_READS``, with an aliased ``model`` replaced
    by its served name; ``raw`` itself when there is no alias to apply or it is not a
    JSON object (the engine answers a malformed body with its own error, as before)."""
    if not gw.spec.model_aliases or not raw:
        return raw
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    return aliased(gw, body, raw) if isinstance(body, dict) else raw


def _add_aliases(gw: GatewayView, data: list[Any]) -> None:
    """Each alias whose target is in ``data`` appended as a copy named for it."""
    by_id = {m.get("id"): m for m in data if isinstance(m, dict)}
    for alias, target in gw.spec.model_aliases.items():
        if target in by_id and alias not in by_id:
            data.append({**by_id[target], "id": alias})


def engine_models(gw: GatewayView, content: bytes) -> bytes:
    """The engine's ``/v1/models`` answer with ``"supervisor"`` (``supervisor_mark``) on
    each model object and the aliases added, read and written once; ``content`` unchanged
    when it is not the OpenAI list shape."""
    try:
        body: Any = json.loads(content)
    except ValueError:
        return content
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return content
    mark = supervisor_mark(gw)
    for model in data:
        if isinstance(model, dict):
            model["supervisor"] = mark
    _add_aliases(gw, data)
    return json.dumps(body).encode()

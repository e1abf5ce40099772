"""The node agent's answer to ``GET /v1/node/sample``, validated before the head believes it.

The agent (agent_supervisor/agent/app.py) answers ``{"node": NAME, "agent_wall_s": SECONDS,
"sample": {...NodeSample fields...} | null}``; ``sample`` is null until the agent has taken its
first sample. Anything else (not JSON, wrong types, NaN or infinite numbers, negative byte
counts, ratios outside 0-1, a body over ``MAX_ANSWER_BYTES``) is refused with
``NodeAnswerError``, so a bad answer is that node's unknown sample for the tick and never an
exception in the poller or a wrong-typed value in a guard (issue 34: ``{"sample": null}``
ended polling for good, wrong-typed values made every tick raise).

The sample model is made from ``NodeSample``'s own fields and type hints (strict pydantic
types: no "5" for 5, no true for 1; JSON arrays for tuples), so a field added there is
validated here without a second list. Unknown keys (a newer agent) are ignored.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from agent_supervisor.telemetry.node_sample import NodeSample

__all__ = ["MAX_ANSWER_BYTES", "NodeAnswer", "NodeAnswerError", "parse_node_answer"]

#: An answer is about 2 KB (a NodeSample and a short kill evidence); 1 MiB bounds the memory
#: one answer can take on the head, which is OOM-protected (issue 34).
MAX_ANSWER_BYTES = 1 << 20

#: Fields the head fills in itself: the agent's values for them are ignored.
HEAD_FIELDS = ("age_seconds", "clock_skew_seconds", "error")

_CONFIG = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, frozen=True)
_BYTES = Annotated[int, Field(ge=0, lt=1 << 63)]
_RATIO = Annotated[float, Field(ge=0.0, le=1.0)]
_PID = Annotated[int, Field(ge=0, lt=1 << 31)]


class NodeAnswerError(ValueError):
    """The agent's answer cannot be believed; ``str()`` says why in one short line."""


def _field_type(name: str, hint: Any) -> Any:
    """The hint of a NodeSample field, narrowed by its unit suffix (``_bytes``, ``_ratio``)."""
    if name.endswith("_bytes"):
        return _BYTES | None
    if name.endswith("_ratio"):
        return _RATIO | None
    if name.endswith("_pid"):
        return _PID | None
    if name == "rank_leftover_pids":
        return tuple[_PID, ...] | None
    return hint


def _sample_model() -> type[BaseModel]:
    hints = typing.get_type_hints(NodeSample)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(NodeSample):
        if field.name in HEAD_FIELDS:
            continue
        default = ... if field.default is dataclasses.MISSING else field.default
        fields[field.name] = (_field_type(field.name, hints[field.name]), default)
    model: type[BaseModel] = create_model("NodeSampleAnswer", __config__=_CONFIG, **fields)
    return model


NodeSampleAnswer = _sample_model()


class NodeAnswer(BaseModel):
    """The whole answer: the agent's clock (UTC epoch seconds) and its sample or None."""

    model_config = _CONFIG
    node: str | None = None
    agent_wall_s: float
    sample: NodeSampleAnswer | None  # type: ignore[valid-type]


def _finite(value: object, depth: int = 0) -> bool:
    """No NaN or infinity anywhere inside ``value`` (the kill evidence is free-form JSON)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if depth > 16:
        return False
    if isinstance(value, dict):
        return all(_finite(v, depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(v, depth + 1) for v in value)
    return True


def parse_node_answer(body: bytes) -> tuple[NodeSample | None, float]:
    """(the agent's sample or None when it has none yet, the agent's wall clock in seconds).

    Raises: NodeAnswerError for a body over MAX_ANSWER_BYTES, not JSON, or not an answer of
    the shape above (the first of pydantic's errors, with its location, as the reason).
    Never raises anything else.
    """
    if len(body) > MAX_ANSWER_BYTES:
        raise NodeAnswerError(f"answer of {len(body)} bytes is over {MAX_ANSWER_BYTES}")
    try:
        answer = NodeAnswer.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "answer"
        raise NodeAnswerError(f"{where}: {first['msg']}") from exc
    except (ValueError, RecursionError) as exc:  # pydantic-core's own limits
        raise NodeAnswerError(f"not an answer: {type(exc).__name__}") from exc
    if answer.sample is None:
        return None, answer.agent_wall_s
    values = answer.sample.model_dump()
    if not _finite(values.get("rank_kill_evidence")):
        raise NodeAnswerError("sample.rank_kill_evidence: not finite or nested too deep")
    return NodeSample(**values), answer.agent_wall_s

"""Reading a policy file's YAML safely, before validation (issue 17).

``parse_yaml`` is ``yaml.SafeLoader`` with three refusals added, each a ``PolicyError``
with the line: a duplicate key (``gateway:`` twice silently won), nesting past
``MAX_YAML_DEPTH`` (10,000 levels raised RecursionError), and aliases expanding past
``MAX_YAML_NODES`` ("billion laughs" hung the validator). ``interpolate`` replaces
``${NAME}`` from the environment. ``shown`` decides which values an error may print:
never one that may be a secret.

``load_policy`` (agent_supervisor/policy/load.py) validates strictly, as the JSON Schema
(policies/policy.schema.json) reads the file (issue 33): a quoted number or boolean
(``port: "8080"``, ``enabled: "yes"``) is a string and refused, where pydantic's lax mode
had converted it; an exponent without a dot (``1e9``) is a number, as in YAML 1.2;
``validation_problems`` words its errors.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from agent_supervisor.errors import HIDDEN, PolicyError

__all__ = ["MAX_YAML_DEPTH", "MAX_YAML_NODES", "interpolate", "parse_yaml", "shown",
           "validation_problems"]


#: Deepest nesting of mappings and lists a policy may have: the shipped ones reach 5.
#: PyYAML's composer recurses per level, so 10,000 levels raised RecursionError (issue 17).
MAX_YAML_DEPTH = 32

#: Most nodes a policy may expand to once its aliases are followed: the shipped ones
#: have a few hundred. Nine levels of ten aliases ("billion laughs") expand to 10^9 and
#: hung the validator and the error formatter (issue 17); counted without expanding.
MAX_YAML_NODES = 20_000

#: ``${NAME}`` in a string value is replaced by that environment variable (issue 17:
#: secrets out of the file); ``$${`` stands for a literal ``${``.
_ENV_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

#: A float written with an exponent and no dot (``1e9``, ``5E-3``): a number in YAML 1.2,
#: in the JSON Schema and in an editor, a string under PyYAML's YAML 1.1 rules (which want
#: ``1.0e+9``). Resolved as a float so strict validation takes it (issue 33).
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")

#: pydantic's error types for a value that is not a number, integer or boolean.
_SCALAR_TYPE_ERRORS = ("int_type", "float_type", "bool_type")


class _PolicyLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no stubs here
    """``yaml.SafeLoader`` that refuses duplicate keys, nesting past ``MAX_YAML_DEPTH``
    and documents expanding past ``MAX_YAML_NODES`` (issue 17), each a
    ``yaml.MarkedYAMLError`` with its line."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_YAML_DEPTH} levels",
                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue
                key = key_node.value
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_PolicyLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT,
                                    list("-+.0123456789"))


def _expanded_size(node: Any, memo: dict[int, int]) -> int:
    """Nodes ``node`` stands for with every alias followed (memoised: linear time)."""
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = 1                       # a cycle counts once
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    memo[id(node)] = size
    return size


def parse_yaml(text: str, source: str) -> Any:
    """The YAML document in ``text`` as Python values; PolicyError (line, column and
    reason, never the text itself) for bad syntax, duplicate keys and the limits."""
    loader: _PolicyLoader | None = None
    try:
        loader = _PolicyLoader(text)     # its reader already refuses control characters
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_YAML_NODES:
            raise PolicyError(source, message=f"not a policy: expands to more than "
                              f"{MAX_YAML_NODES} YAML nodes once its aliases are followed")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise PolicyError(source, message=f"not valid YAML: {where}{problem}") from None
    except RecursionError:
        raise PolicyError(source, message="not valid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def interpolate(value: Any, loc: str, source: str, environ: dict[str, str]) -> Any:
    """``value`` with ``${NAME}`` in its strings replaced from ``environ``; PolicyError
    naming the field and the variable (never its value) when one is unset."""
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            if m.group(1) is None:
                return "${"
            if m.group(1) not in environ:
                raise PolicyError(source, [(loc or "<top>", HIDDEN,
                                            f"environment variable {m.group(1)} is not set")])
            return environ[m.group(1)]
        return _ENV_REF.sub(sub, value) if "$" in value else value
    if isinstance(value, dict):
        return {k: interpolate(v, f"{loc}.{k}" if loc else str(k), source, environ)
                for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, f"{loc}[{i}]", source, environ) for i, v in enumerate(value)]
    return value


#: Fields whose values are never echoed in an error: they may hold a secret (a key, a
#: token, a URL with a password or a webhook's token in its path, an engine argument
#: such as ``--api-key``).
_SECRET_FIELDS = re.compile(r"(^|\.)(engine\.args|engine\.environment|alerts|storage\."
                            r"database_url|gateway\.api_keys|admin)|url|key|token|secret|"
                            r"password|credential|auth", re.I)


def shown(loc: str, value: Any) -> Any:
    """``value`` as an error may show it, or ``HIDDEN``: only numbers, booleans, None
    and short strings of fields that cannot hold a secret (issue 17: a whole-policy
    dump with its webhook URL was printed)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and len(value) <= 64 and not _SECRET_FIELDS.search(loc):
        return value
    return HIDDEN


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _reason(err: ErrorDetails) -> str:
    """pydantic's message for one problem; for a string where a number or boolean belongs,
    also why: a quoted ``"8080"`` or ``"yes"`` is a string (issue 33), and ``inf`` or
    ``nan`` written bare is one too (YAML's are ``.inf`` and ``.nan``), never finite."""
    reason = err["msg"].removeprefix("Value error, ")
    text = err.get("input")
    if err["type"] not in _SCALAR_TYPE_ERRORS or not isinstance(text, str):
        return reason
    try:
        unquoted = parse_yaml(text, "<value>")
    except PolicyError:
        return reason
    if isinstance(unquoted, bool | int | float) and math.isfinite(unquoted):
        return f"{reason}; a quoted value is a string: write it without quotes"
    if err["type"] == "float_type" and text.strip().lower().lstrip("+-") in ("inf", "nan",
                                                                           "infinity"):
        return "Input should be a finite number"
    return reason


def validation_problems(exc: ValidationError) -> list[tuple[str, Any, str]]:
    """Each error of a failed validation as ``(field, value shown, reason)``: the field a
    dotted path (``modes[1].args``), the value only where it cannot be a secret
    (``shown``), the reason in the policy's words (``PolicyError``'s problems)."""
    problems = []
    for err in exc.errors():
        loc = _dotted(err["loc"])
        problems.append((loc, shown(loc, err.get("input")), _reason(err)))
    return problems
